# SPDX-License-Identifier: MIT
# STRATA_SUMMARY: what configure found, printed last.
AC_DEFUN([STRATA_SUMMARY], [
  AS_IF([test "x$strata_opencl_happy" = xyes], [strata_s_ocl="yes"], [strata_s_ocl="no: $strata_opencl_why"])
  AS_IF([test "x$strata_cuda_happy" = xyes], [strata_s_cuda="yes ($NVCC)"], [strata_s_cuda="no: $strata_cuda_why"])
  AS_IF([test "x$strata_nccl_happy" = xyes], [strata_s_nccl="found (${NCCL_LIBS}); the CUDA backend loads libnccl.so.2 at run time"], [strata_s_nccl="not found ($strata_nccl_why); the CUDA backend still loads libnccl.so.2 at run time where it exists"])
  AS_IF([test "x$strata_mpi_happy" = xyes], [strata_s_mpi="yes ($strata_mpi_how: $MPI_LIBS); tests under ${STRATA_MPIRUN_PATH:-$MPIRUN (not on PATH: the MPI tests will skip)}"], [strata_s_mpi="no: $strata_mpi_why (one process only; ./configure --with-mpi)"])
  AS_IF([test "x$strata_criterion_happy" = xyes], [strata_s_tests="yes"], [strata_s_tests="no: Criterion not found"])
  AS_IF([test "x$strata_fuzz_happy" = xyes], [strata_s_fuzz="yes (tests/fuzz, run with tests/fuzz/run-all)"], [strata_s_fuzz="no (--enable-fuzzing CC=clang)"])
  cat <<STRATA_EOF

strata $PACKAGE_VERSION configured
  prefix            : $prefix
  backends
    host (GEMM)     : $strata_blas_name ($BLAS_LIBS)
    opencl          : $strata_s_ocl
    cuda            : $strata_s_cuda
      NCCL          : $strata_s_nccl
  MPI               : $strata_s_mpi
  topology (hwloc)  : yes
  tests (Criterion) : $strata_s_tests
  fuzzers           : $strata_s_fuzz
STRATA_EOF
])
