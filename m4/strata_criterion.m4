# SPDX-License-Identifier: MIT
# STRATA_CHECK_CRITERION: Criterion runs the test suites; without it `make check` refuses to run.
AC_DEFUN([STRATA_CHECK_CRITERION], [
  strata_criterion_happy=no
  PKG_CHECK_MODULES([CRITERION], [criterion >= 2.3], [strata_criterion_happy=yes],
    [AC_MSG_WARN([Criterion not found: make check will not build the tests (Debian: apt-get install libcriterion-dev)])])
  AM_CONDITIONAL([HAVE_CRITERION], [test "x$strata_criterion_happy" = xyes])
])
