# SPDX-License-Identifier: MIT
# STRATA_CHECK_CUDA: nvcc, cudart and cuBLAS, for the CUDA backend (NCCL is optional: m4/strata_nccl.m4).
# --with-cuda=DIR names the toolkit; by default it is found from nvcc on PATH or /usr/local/cuda.
# --without-cuda turns it off; --with-cuda makes its absence an error.
AC_DEFUN([STRATA_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA backend with the toolkit in DIR @<:@default=check@:>@])],
    [], [with_cuda=check])
  AC_ARG_VAR([NVCC], [the CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc])
  AC_ARG_VAR([CUDA_CFLAGS], [C compiler flags for the CUDA toolkit])
  AC_ARG_VAR([CUDA_LIBS], [linker flags for cudart and cuBLAS])
  strata_cuda_happy=no
  strata_cuda_why="disabled (--without-cuda)"
  AS_IF([test "x$with_cuda" != xno], [
    strata_cuda_dir=""
    AS_CASE([$with_cuda],
      [yes|check], [
        AS_IF([test "x$NVCC" = x], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])])
        AS_IF([test "x$NVCC" != x], [strata_cuda_dir=`dirname "$NVCC"`; strata_cuda_dir=`dirname "$strata_cuda_dir"`])],
      [strata_cuda_dir=$with_cuda
       AS_IF([test "x$NVCC" = x], [NVCC="$strata_cuda_dir/bin/nvcc"])])
    AS_IF([test "x$strata_cuda_dir" = x || test ! -x "$NVCC"],
      [strata_cuda_why="nvcc not found (give --with-cuda=DIR)"],
      [
      AS_IF([test "x$CUDA_CFLAGS" = x], [CUDA_CFLAGS="-I$strata_cuda_dir/include"])
      strata_cuda_libdir="$strata_cuda_dir/lib64"
      AS_IF([test ! -d "$strata_cuda_libdir"], [strata_cuda_libdir="$strata_cuda_dir/lib"])
      AS_IF([test "x$CUDA_LIBS" = x],
        [CUDA_LIBS="-L$strata_cuda_libdir -Wl,-rpath,$strata_cuda_libdir -lcublas -lcudart"])
      strata_save_CPPFLAGS=$CPPFLAGS; strata_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
      strata_cuda_why=""
      AC_CHECK_HEADERS([cuda_runtime_api.h cublas_v2.h], [], [strata_cuda_why="CUDA headers missing in $strata_cuda_dir/include"])
      AS_IF([test "x$strata_cuda_why" = x], [
        AC_CHECK_FUNC([cudaGetDeviceCount], [
          AC_CHECK_FUNC([cublasCreate_v2], [strata_cuda_happy=yes],
            [strata_cuda_why="cuBLAS library not found"])],
          [strata_cuda_why="cudart not found in $strata_cuda_libdir"])])
      CPPFLAGS=$strata_save_CPPFLAGS; LIBS=$strata_save_LIBS])
    AS_IF([test "x$strata_cuda_happy" != xyes && test "x$with_cuda" != xcheck],
      [AC_MSG_ERROR([--with-cuda given but $strata_cuda_why])])])
  AS_IF([test "x$NVCCFLAGS" = x], [NVCCFLAGS="-O2"])
  AM_CONDITIONAL([BUILD_CUDA], [test "x$strata_cuda_happy" = xyes])
])
