# SPDX-License-Identifier: MIT
# STRATA_CHECK_JANSSON: jansson reads model files and checkpoint metadata (required).
AC_DEFUN([STRATA_CHECK_JANSSON], [
  PKG_CHECK_MODULES([JANSSON], [jansson >= 2.10], [],
    [AC_MSG_ERROR([jansson not found (Debian: apt-get install libjansson-dev)])])
])
