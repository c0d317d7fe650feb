# SPDX-License-Identifier: MIT
# STRATA_CHECK_BLAS: a CBLAS for the host backend (OpenBLAS first). BLAS_CFLAGS/BLAS_LIBS override.
AC_DEFUN([STRATA_CHECK_BLAS], [
  AC_ARG_VAR([BLAS_CFLAGS], [C compiler flags for a CBLAS, overriding pkg-config])
  AC_ARG_VAR([BLAS_LIBS], [linker flags for a CBLAS, overriding pkg-config])
  strata_blas_happy=no
  AS_IF([test "x$BLAS_LIBS" = x],
    [PKG_CHECK_MODULES([BLAS], [openblas], [strata_blas_happy=yes],
      [PKG_CHECK_MODULES([BLAS], [blas], [strata_blas_happy=yes], [:])])],
    [strata_blas_happy=yes])
  AS_IF([test "x$strata_blas_happy" = xyes], [
    strata_save_CFLAGS=$CFLAGS; strata_save_LIBS=$LIBS
    CFLAGS="$CFLAGS $BLAS_CFLAGS"; LIBS="$BLAS_LIBS $LIBS"
    AC_CHECK_HEADER([cblas.h], [], [strata_blas_happy=no])
    AC_CHECK_FUNC([cblas_sgemm], [], [strata_blas_happy=no])
    AC_CHECK_FUNCS([openblas_set_num_threads openblas_get_corename])
    CFLAGS=$strata_save_CFLAGS; LIBS=$strata_save_LIBS])
  AS_IF([test "x$strata_blas_happy" != xyes],
    [AC_MSG_ERROR([no CBLAS with cblas_sgemm found (Debian: apt-get install libopenblas-dev)])])
])
