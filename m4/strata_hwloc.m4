# SPDX-License-Identifier: MIT
# STRATA_CHECK_HWLOC: hwloc 2.x is required (topology discovery).
AC_DEFUN([STRATA_CHECK_HWLOC], [
  strata_hwloc_happy=no
  PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0], [strata_hwloc_happy=yes], [
    AC_CHECK_HEADER([hwloc.h], [
      AC_CHECK_LIB([hwloc], [hwloc_topology_init],
        [strata_hwloc_happy=yes; HWLOC_LIBS="-lhwloc"])])])
  AS_IF([test "x$strata_hwloc_happy" != xyes],
    [AC_MSG_ERROR([hwloc 2.x not found (Debian: apt-get install libhwloc-dev)])])
])
