# SPDX-License-Identifier: MIT
# STRATA_CHECK_BLAS: the GEMM library of the host backend, --with-blas=auto|openblas|blis|dnnl|generic.
# BLAS_CFLAGS/BLAS_LIBS override the flags of the chosen one.
AC_DEFUN([STRATA_CHECK_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=LIB],
      [GEMM library of the host backend: openblas (its kernels chosen from the CPU's feature flags), blis, dnnl
       (oneDNN's dnnl_sgemm), generic (any CBLAS through pkg-config blas), or auto: oneDNN, else OpenBLAS, else generic @<:@default=auto@:>@])],
    [], [with_blas=auto])
  AC_ARG_VAR([BLAS_CFLAGS], [C compiler flags for the GEMM library, overriding pkg-config])
  AC_ARG_VAR([BLAS_LIBS], [linker flags for the GEMM library, overriding pkg-config])
  strata_blas_happy=no
  strata_blas_why=
  strata_blas_name=
  strata_blas_multiarch=`$CC -print-multiarch 2>/dev/null`
  AS_CASE([$with_blas],
    [auto|yes], [strata_blas_try="dnnl openblas generic"],
    [openblas|blis|dnnl|generic], [strata_blas_try=$with_blas],
    [AC_MSG_ERROR([--with-blas=$with_blas: expected openblas, blis, dnnl, generic or auto])])
  for strata_blas_lib in $strata_blas_try; do
    strata_save_CFLAGS=$CFLAGS; strata_save_LIBS=$LIBS
    strata_blas_cflags=$BLAS_CFLAGS; strata_blas_libs=$BLAS_LIBS
    AS_CASE([$strata_blas_lib],
      [openblas], [AS_IF([test "x$BLAS_LIBS" = x],
                     [PKG_CHECK_MODULES([OPENBLAS], [openblas],
                       [strata_blas_cflags=$OPENBLAS_CFLAGS; strata_blas_libs=$OPENBLAS_LIBS],
                       [strata_blas_libs=-lopenblas])])],
      [blis], [AS_IF([test "x$BLAS_LIBS" = x], [
                 strata_blas_libs=-lblis
                 # Debian: each threading build's headers sit in a directory of their own (-isystem: their
                 # unused inline functions are no warnings of ours)
                 for strata_d in blis-openmp blis-pthread blis-serial; do
                   AS_IF([test -n "$strata_blas_multiarch" && test -f "/usr/include/$strata_blas_multiarch/$strata_d/cblas.h"],
                     [strata_blas_cflags="-isystem /usr/include/$strata_blas_multiarch/$strata_d"; break])
                 done])],
      [dnnl], [AS_IF([test "x$BLAS_LIBS" = x], [strata_blas_libs=-ldnnl])],
      [generic], [AS_IF([test "x$BLAS_LIBS" = x],
                    [PKG_CHECK_MODULES([GENERIC_BLAS], [blas],
                      [strata_blas_cflags=$GENERIC_BLAS_CFLAGS; strata_blas_libs=$GENERIC_BLAS_LIBS],
                      [strata_blas_libs=-lblas])])])
    CFLAGS="$CFLAGS $strata_blas_cflags"; LIBS="$strata_blas_libs $LIBS"
    strata_blas_ok=yes
    AS_IF([test "x$strata_blas_lib" = xdnnl], [
      AC_CHECK_HEADER([oneapi/dnnl/dnnl.h], [], [strata_blas_ok=no; strata_blas_why="oneapi/dnnl/dnnl.h not found (Debian: libdnnl-dev)"])
      AS_IF([test $strata_blas_ok = yes], [
        AC_MSG_CHECKING([for dnnl_sgemm])
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <oneapi/dnnl/dnnl.h>]],
            [[float a = 1, b = 1, c = 0; return dnnl_sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
          [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); strata_blas_ok=no; strata_blas_why="dnnl_sgemm not found in $strata_blas_libs"])])
    ], [
      # each library name its own cache variable: a failed try must not answer for the next
      AS_UNSET([ac_cv_header_cblas_h]); AS_UNSET([ac_cv_func_cblas_sgemm])
      AC_CHECK_HEADER([cblas.h], [], [strata_blas_ok=no; strata_blas_why="cblas.h not found for $strata_blas_lib"])
      AS_IF([test $strata_blas_ok = yes],
        [AC_CHECK_FUNC([cblas_sgemm], [], [strata_blas_ok=no; strata_blas_why="cblas_sgemm not found in $strata_blas_libs"])])
      AS_IF([test $strata_blas_ok = yes && test $strata_blas_lib = openblas],
        [AC_CHECK_FUNC([openblas_get_corename], [],
          [strata_blas_ok=no; strata_blas_why="$strata_blas_libs is not OpenBLAS (no openblas_get_corename)"])])
      # bf16 GEMMs: OpenBLAS 0.3.10 and later built with BUILD_BFLOAT16 have cblas_sbgemm
      strata_blas_sbgemm=no
      AS_IF([test $strata_blas_ok = yes && test $strata_blas_lib = openblas],
        [AC_CHECK_FUNC([cblas_sbgemm], [strata_blas_sbgemm=yes])])
    ])
    CFLAGS=$strata_save_CFLAGS; LIBS=$strata_save_LIBS
    AS_IF([test $strata_blas_ok = yes], [
      strata_blas_happy=yes
      BLAS_CFLAGS=$strata_blas_cflags; BLAS_LIBS=$strata_blas_libs
      break])
  done
  AS_IF([test "x$strata_blas_happy" != xyes], [
    AS_IF([test "x$with_blas" = xauto || test "x$with_blas" = xyes],
      [AC_MSG_ERROR([no GEMM library found: neither oneDNN (dnnl_sgemm) nor a CBLAS with cblas_sgemm (Debian: apt-get install libdnnl-dev, or libopenblas-dev)])],
      [AC_MSG_ERROR([--with-blas=$with_blas: $strata_blas_why])])])
  AS_CASE([$strata_blas_lib],
    [openblas], [AC_DEFINE([STRATA_BLAS_OPENBLAS], [1], [The host backend's GEMM is OpenBLAS])
                 AS_IF([test "x$strata_blas_sbgemm" = xyes],
                   [AC_DEFINE([STRATA_HAVE_SBGEMM], [1], [OpenBLAS has cblas_sbgemm (bf16 inputs, float32 output)])])
                 AC_DEFINE([HAVE_OPENBLAS_SET_NUM_THREADS], [1], [OpenBLAS's thread count can be set])
                 AC_DEFINE([HAVE_OPENBLAS_GET_CORENAME], [1], [OpenBLAS names its kernels])
                 strata_blas_name="OpenBLAS, kernels chosen from the CPU's feature flags unless OPENBLAS_CORETYPE is set"],
    [blis], [AC_DEFINE([STRATA_BLAS_BLIS], [1], [The host backend's GEMM is BLIS's CBLAS])
             strata_blas_name="BLIS (CBLAS interface)"],
    [dnnl], [AC_DEFINE([STRATA_BLAS_DNNL], [1], [The host backend's GEMM is oneDNN's dnnl_sgemm])
             strata_blas_name="oneDNN dnnl_sgemm"],
    [generic], [AC_DEFINE([STRATA_BLAS_GENERIC], [1], [The host backend's GEMM is a CBLAS from pkg-config blas])
                strata_blas_name="generic CBLAS (pkg-config blas)"])
  AC_DEFINE_UNQUOTED([STRATA_BLAS_NAME], ["$strata_blas_lib"], [Which GEMM library the host backend was built with])
])
