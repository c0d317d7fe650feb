# SPDX-License-Identifier: MIT
# STRATA_CHECK_OPENCL: the OpenCL ICD loader and CLBlast, for the OpenCL backend.
# --without-opencl turns it off; --with-opencl makes its absence an error.
AC_DEFUN([STRATA_CHECK_OPENCL], [
  AC_ARG_WITH([opencl],
    [AS_HELP_STRING([--with-opencl], [build the OpenCL backend (OpenCL ICD loader + CLBlast) @<:@default=check@:>@])],
    [], [with_opencl=check])
  AC_ARG_VAR([OPENCL_CFLAGS], [C compiler flags for OpenCL and CLBlast])
  AC_ARG_VAR([OPENCL_LIBS], [linker flags for OpenCL and CLBlast])
  strata_opencl_happy=no
  strata_opencl_why="disabled (--without-opencl)"
  AS_IF([test "x$with_opencl" != xno], [
    strata_opencl_why=""
    AS_IF([test "x$OPENCL_LIBS" = x], [
      PKG_CHECK_MODULES([OPENCL], [OpenCL clblast], [],
        [OPENCL_LIBS="-lOpenCL -lclblast"])])
    strata_save_CFLAGS=$CFLAGS; strata_save_CPPFLAGS=$CPPFLAGS; strata_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $OPENCL_CFLAGS -DCL_TARGET_OPENCL_VERSION=120"
    LIBS="$OPENCL_LIBS $LIBS"
    AC_CHECK_HEADER([CL/cl.h], [
      AC_CHECK_HEADER([clblast_c.h], [
        AC_CHECK_FUNC([clGetPlatformIDs], [
          AC_CHECK_FUNC([CLBlastSgemm], [strata_opencl_happy=yes],
            [strata_opencl_why="CLBlast library not found (libclblast-dev)"])],
          [strata_opencl_why="OpenCL ICD loader not found (ocl-icd-opencl-dev)"])],
        [strata_opencl_why="clblast_c.h not found (libclblast-dev)"])],
      [strata_opencl_why="CL/cl.h not found (opencl-headers)"])
    CFLAGS=$strata_save_CFLAGS; CPPFLAGS=$strata_save_CPPFLAGS; LIBS=$strata_save_LIBS
    AS_IF([test "x$strata_opencl_happy" != xyes && test "x$with_opencl" = xyes],
      [AC_MSG_ERROR([--with-opencl given but $strata_opencl_why])])])
  AM_CONDITIONAL([BUILD_OPENCL], [test "x$strata_opencl_happy" = xyes])
])
