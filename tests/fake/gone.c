/* SPDX-License-Identifier: MIT */
/* gone.c — a library that a fake backend module links and that is never installed where the loader looks: the module
** then fails to load, naming it (tests/test-gpu-run.sh plays a missing cuBLAS with it). */

int strata_test_gone(void);
__attribute__((visibility("default"))) int strata_test_gone(void) { return 1; }
