# SPDX-License-Identifier: MIT
# lib/io.mk — training data (text, token files, synthetic shapes), safetensors checkpoints and Hugging Face GPT-2
# checkpoints, with their Criterion suites and fixtures.
libstrata_la_SOURCES += lib/data.c lib/checkpoint.c lib/hf.c
stratainclude_HEADERS += include/strata/hf.h

if HAVE_CRITERION
check_PROGRAMS += tests/test-data tests/test-checkpoint
TESTS += tests/test-data tests/test-checkpoint
tests_test_data_SOURCES = tests/test-data.c tests/common.h
tests_test_data_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_data_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
tests_test_checkpoint_SOURCES = tests/test-checkpoint.c tests/common.h
tests_test_checkpoint_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_checkpoint_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
tests_test_hf_SOURCES = tests/test-hf.c tests/common.h
tests_test_hf_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_hf_CPPFLAGS = $(AM_CPPFLAGS) -DHF_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/hf-gpt2"'
tests_test_hf_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
check_PROGRAMS += tests/test-hf
TESTS += tests/test-hf
endif

# Made once by make-fixture.py with transformers (never run by the build or the tests).
EXTRA_DIST += tests/fixtures/hf-gpt2/make-fixture.py \
	tests/fixtures/hf-gpt2/small/config.json tests/fixtures/hf-gpt2/small/generation_config.json \
	tests/fixtures/hf-gpt2/small/model.safetensors tests/fixtures/hf-gpt2/small/reference.safetensors \
	tests/fixtures/hf-gpt2/tied-50257/config.json tests/fixtures/hf-gpt2/tied-50257/generation_config.json \
	tests/fixtures/hf-gpt2/tied-50257/model.safetensors tests/fixtures/hf-gpt2/tied-50257/reference.safetensors
