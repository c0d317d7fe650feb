# SPDX-License-Identifier: MIT
# tests/fuzz/ — libFuzzer harnesses (./configure --enable-fuzzing CC=clang), their seed corpora and tests/fuzz/run-all.
EXTRA_DIST += tests/fuzz/fuzz.h tests/fuzz/run-all tests/fuzz/fuzz-topology-xml.c tests/fuzz/fuzz-model-json.c \
	tests/fuzz/fuzz-safetensors.c tests/fuzz/fuzz-checkpoint.c tests/fuzz/fuzz-corpus.c \
	tests/fuzz/fuzz-layout-json.c tests/fuzz/fuzz-calibration-json.c tests/fuzz/fuzz-tokens.c \
	tests/fuzz/fuzz-hf-config.c tests/fuzz/fuzz-hf-weights.c \
	tests/fuzz/corpus tests/fuzz/dict

if ENABLE_FUZZING
fuzz_programs = tests/fuzz/fuzz-topology-xml tests/fuzz/fuzz-model-json tests/fuzz/fuzz-safetensors \
	tests/fuzz/fuzz-checkpoint tests/fuzz/fuzz-corpus tests/fuzz/fuzz-layout-json tests/fuzz/fuzz-calibration-json \
	tests/fuzz/fuzz-tokens tests/fuzz/fuzz-hf-config tests/fuzz/fuzz-hf-weights
noinst_PROGRAMS += $(fuzz_programs)
fuzz_ldflags = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_topology_xml_SOURCES = tests/fuzz/fuzz-topology-xml.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_topology_xml_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_topology_xml_LDADD = libstrata.la
tests_fuzz_fuzz_model_json_SOURCES = tests/fuzz/fuzz-model-json.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_model_json_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_model_json_LDADD = libstrata.la
tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz-safetensors.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_safetensors_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_safetensors_LDADD = libstrata.la
tests_fuzz_fuzz_checkpoint_SOURCES = tests/fuzz/fuzz-checkpoint.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_checkpoint_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_checkpoint_LDADD = libstrata.la
tests_fuzz_fuzz_corpus_SOURCES = tests/fuzz/fuzz-corpus.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_corpus_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_corpus_LDADD = libstrata.la
tests_fuzz_fuzz_layout_json_SOURCES = tests/fuzz/fuzz-layout-json.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_layout_json_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_layout_json_LDADD = libstrata.la
tests_fuzz_fuzz_calibration_json_SOURCES = tests/fuzz/fuzz-calibration-json.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_calibration_json_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_calibration_json_LDADD = libstrata.la
tests_fuzz_fuzz_tokens_SOURCES = tests/fuzz/fuzz-tokens.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_tokens_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_tokens_LDADD = libstrata.la
tests_fuzz_fuzz_hf_config_SOURCES = tests/fuzz/fuzz-hf-config.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_hf_config_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_hf_config_LDADD = libstrata.la
tests_fuzz_fuzz_hf_weights_SOURCES = tests/fuzz/fuzz-hf-weights.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_hf_weights_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_hf_weights_LDADD = libstrata.la

# make fuzz FUZZ_SECONDS=60: every harness for that long on its seed corpus (see tests/fuzz/run-all)
fuzz: $(fuzz_programs)
	$(top_srcdir)/tests/fuzz/run-all $(FUZZ_SECONDS)
.PHONY: fuzz
endif
FUZZ_SECONDS = 60
