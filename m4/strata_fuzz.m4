# SPDX-License-Identifier: MIT
# STRATA_CHECK_FUZZING: --enable-fuzzing builds the libFuzzer harnesses of tests/fuzz/ (clang only) and instruments
# the whole tree for them: coverage, AddressSanitizer and UndefinedBehaviorSanitizer.
AC_DEFUN([STRATA_CHECK_FUZZING], [
  AC_ARG_ENABLE([fuzzing],
    [AS_HELP_STRING([--enable-fuzzing], [build the libFuzzer harnesses in tests/fuzz (needs clang, e.g. CC=clang)])],
    [], [enable_fuzzing=no])
  strata_fuzz_happy=no
  FUZZ_LDFLAGS=
  AS_IF([test "x$enable_fuzzing" = xyes], [
    strata_fuzz_san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
    strata_fuzz_save_CFLAGS=$CFLAGS
    strata_fuzz_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS -fsanitize=fuzzer $strata_fuzz_san"
    AC_MSG_CHECKING([whether $CC links libFuzzer harnesses])
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { (void)data; (void)size; return 0; }
]])], [strata_fuzz_happy=yes])
    AC_MSG_RESULT([$strata_fuzz_happy])
    CFLAGS=$strata_fuzz_save_CFLAGS
    LDFLAGS=$strata_fuzz_save_LDFLAGS
    AS_IF([test "x$strata_fuzz_happy" != xyes],
      [AC_MSG_ERROR([--enable-fuzzing needs a compiler with libFuzzer: CC=clang (Debian: apt-get install clang libclang-rt-14-dev)])])
    # everything is instrumented, so that the fuzzers see coverage inside the library and the modules
    CFLAGS="$CFLAGS -fsanitize=fuzzer-no-link $strata_fuzz_san"
    LDFLAGS="$LDFLAGS -fsanitize=address,undefined"
    FUZZ_LDFLAGS="-fsanitize=fuzzer"
  ])
  AC_SUBST([FUZZ_LDFLAGS])
  AM_CONDITIONAL([ENABLE_FUZZING], [test "x$strata_fuzz_happy" = xyes])
])
