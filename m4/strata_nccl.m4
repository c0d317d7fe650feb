# SPDX-License-Identifier: MIT
# STRATA_CHECK_NCCL: NCCL for collectives among CUDA devices, optional; needs the CUDA backend.
# --with-nccl=DIR names where it is installed (DIR/include, DIR/lib64 or DIR/lib); by default
# pkg-config (nccl.pc), then the CUDA toolkit's own directories are tried. --without-nccl turns it
# off; --with-nccl makes its absence an error. Defines STRATA_HAVE_NCCL and the conditional HAVE_NCCL.
# The module does not link NCCL: it loads libnccl.so.2 with dlopen (backends/cuda/nccl.c), so a box
# without NCCL still gets the CUDA backend, with strata's ring for collectives.
AC_DEFUN([STRATA_CHECK_NCCL], [
  AC_REQUIRE([STRATA_CHECK_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [require NCCL for collectives among CUDA devices (the CUDA backend loads libnccl.so.2 at run time, so a box without it still gets the backend) @<:@default=check@:>@])],
    [], [with_nccl=check])
  AC_ARG_VAR([NCCL_CFLAGS], [C compiler flags for NCCL])
  AC_ARG_VAR([NCCL_LIBS], [linker flags for NCCL])
  strata_nccl_happy=no
  strata_nccl_why="disabled (--without-nccl)"
  AS_IF([test "x$with_nccl" != xno], [
    AS_IF([test "x$strata_cuda_happy" != xyes], [strata_nccl_why="needs the CUDA backend"], [
      strata_nccl_why=""
      AS_CASE([$with_nccl],
        [yes|check], [
          AS_IF([test "x$NCCL_LIBS" = x], [
            PKG_CHECK_MODULES([NCCL], [nccl], [],
              [NCCL_CFLAGS=""; NCCL_LIBS="-lnccl"])])],
        [AS_IF([test "x$NCCL_CFLAGS" = x], [NCCL_CFLAGS="-I$with_nccl/include"])
         strata_nccl_libdir="$with_nccl/lib64"
         AS_IF([test ! -d "$strata_nccl_libdir"], [strata_nccl_libdir="$with_nccl/lib"])
         AS_IF([test "x$NCCL_LIBS" = x], [
           NCCL_LIBS="-L$strata_nccl_libdir -Wl,-rpath,$strata_nccl_libdir -lnccl"])])
      # A directory named by the user must hold NCCL itself: the toolkit's own
      # copy, found through CUDA_LIBS below, must not stand in for it.
      AS_CASE([$with_nccl], [yes|check], [], [
        AS_IF([test ! -f "$with_nccl/include/nccl.h"], [strata_nccl_why="no $with_nccl/include/nccl.h"],
          [ls "$strata_nccl_libdir"/libnccl.so* >/dev/null 2>&1 ||
            strata_nccl_why="no libnccl.so in $strata_nccl_libdir"])])
      # nccl.h includes cuda_runtime.h; the toolkit's directories come after NCCL's own.
      AS_IF([test "x$strata_nccl_why" = x], [
      strata_save_CPPFLAGS=$CPPFLAGS; strata_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $NCCL_CFLAGS $CUDA_CFLAGS"; LIBS="$NCCL_LIBS $CUDA_LIBS $LIBS"
      AC_CHECK_HEADER([nccl.h], [
        AC_CHECK_FUNC([ncclGetVersion], [strata_nccl_happy=yes],
          [strata_nccl_why="the NCCL library (libnccl) not found: $NCCL_LIBS"])],
        [strata_nccl_why="nccl.h not found"])
      CPPFLAGS=$strata_save_CPPFLAGS; LIBS=$strata_save_LIBS])])
    AS_IF([test "x$strata_nccl_happy" != xyes && test "x$with_nccl" != xcheck],
      [AC_MSG_ERROR([--with-nccl given but $strata_nccl_why])])])
  AS_IF([test "x$strata_nccl_happy" = xyes],
    [AC_DEFINE([STRATA_HAVE_NCCL], [1], [Define to 1 when NCCL was found at build time (the CUDA backend loads it at run time).])],
    [NCCL_CFLAGS=""; NCCL_LIBS=""])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$strata_nccl_happy" = xyes])
])
