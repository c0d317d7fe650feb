# SPDX-License-Identifier: MIT
# tools/train.mk — strata-train (the main job), strata-generate and strata-export, their man pages, tool tests and
# benchmark scripts.
bin_PROGRAMS += tools/strata-train tools/strata-generate tools/strata-export
tools_strata_train_SOURCES = %reldir%/strata-train.c %reldir%/cli.h lib/parse.c lib/parse.h
tools_strata_train_LDADD = libstrata.la -lm
tools_strata_generate_SOURCES = %reldir%/strata-generate.c %reldir%/cli.h lib/parse.c lib/parse.h
tools_strata_generate_LDADD = libstrata.la -lm
tools_strata_export_SOURCES = %reldir%/strata-export.c %reldir%/cli.h lib/parse.c lib/parse.h
tools_strata_export_LDADD = libstrata.la
dist_man_MANS += man/strata-train.1 man/strata-generate.1 man/strata-export.1
TESTS += tests/test-strata-train.sh tests/test-strata-interop.sh tests/test-strata-train-dp.sh
EXTRA_DIST += tests/test-strata-train.sh tests/test-strata-interop.sh tests/test-strata-train-dp.sh bench/lib.sh bench/train-mfu.sh bench/pipeline-1f1b.sh bench/train-parallel.sh \
	bench/hetero.sh bench/peers/run.sh bench/peers/gpt.py bench/peers/gpt_pp.py
# The tests' own writer of nanoGPT and llm.c token files.
check_PROGRAMS += tests/write-tokens
tests_write_tokens_SOURCES = tests/write-tokens.c
