# SPDX-License-Identifier: MIT
# tests/ — the one list of tests: Criterion suites (one per unit, run through the TAP driver so that every test case
# is counted), the tools' shell tests, the MPI checks, the fake backend modules and the fixtures.
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
SH_LOG_DRIVER = $(LOG_DRIVER)
LOG_COMPILER = $(top_srcdir)/tests/run-test
SH_LOG_COMPILER = $(top_srcdir)/tests/run-test
TEST_EXTENSIONS = .sh
AM_TESTS_ENVIRONMENT = top_builddir='$(abs_top_builddir)'; top_srcdir='$(abs_top_srcdir)'; MPIRUN='$(MPIRUN)'; export MPIRUN; \
	strata_pkglibdir='$(pkglibdir)'; export top_builddir top_srcdir strata_pkglibdir;
EXTRA_DIST += tests/run-test tests/common.h tests/lsan.supp

if HAVE_CRITERION
suites = tests/test-device \
	tests/test-ops \
	tests/test-ops-llama \
	tests/test-bf16 \
	tests/test-blas \
	tests/test-registry \
	tests/test-numbers \
	tests/test-files \
	tests/test-topology \
	tests/test-data \
	tests/test-checkpoint \
	tests/test-hf \
	tests/test-hf-llama \
	tests/test-comm \
	tests/test-cluster \
	tests/test-layout \
	tests/test-schedule \
	tests/test-parallel \
	tests/test-seqpar \
	tests/test-spatial \
	tests/test-spatial-plan \
	tests/test-train \
	tests/test-llama \
	tests/test-pipeline \
	tests/test-plan \
	tests/test-memory \
	tests/test-grads
check_PROGRAMS += $(suites)
TESTS += $(suites)
# Every suite: Criterion, jansson, the fixtures in the tree (the hand-made topologies and the real hwloc dumps).
suite_cppflags = $(AM_CPPFLAGS) -DSTRATA_TEST_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/topology"' \
	-DSTRATA_TEST_TOPOLOGIES_DIR='"$(abs_top_srcdir)/tests/fixtures/topologies"' \
	-DHF_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/hf-gpt2"' -DFAKE_DIR='"$(abs_top_builddir)/tests/fake"'
suite_cflags = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
suite_ldadd = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
tests_test_device_SOURCES = tests/test-device.c tests/common.h
tests_test_device_CPPFLAGS = $(suite_cppflags)
tests_test_device_CFLAGS = $(suite_cflags)
tests_test_device_LDADD = $(suite_ldadd)
tests_test_ops_SOURCES = tests/test-ops.c tests/common.h
tests_test_ops_CPPFLAGS = $(suite_cppflags)
tests_test_ops_CFLAGS = $(suite_cflags)
tests_test_ops_LDADD = $(suite_ldadd)
tests_test_ops_llama_SOURCES = tests/test-ops-llama.c tests/common.h
tests_test_ops_llama_CPPFLAGS = $(suite_cppflags)
tests_test_ops_llama_CFLAGS = $(suite_cflags)
tests_test_ops_llama_LDADD = $(suite_ldadd)
tests_test_bf16_SOURCES = tests/test-bf16.c tests/common.h
tests_test_bf16_CPPFLAGS = $(suite_cppflags)
tests_test_bf16_CFLAGS = $(suite_cflags)
tests_test_bf16_LDADD = $(suite_ldadd)
tests_test_blas_SOURCES = tests/test-blas.c tests/common.h lib/device/cpu.c lib/device/cpu.h
tests_test_blas_CPPFLAGS = $(suite_cppflags)
tests_test_blas_CFLAGS = $(suite_cflags)
tests_test_blas_LDADD = $(suite_ldadd)
tests_test_registry_SOURCES = tests/test-registry.c tests/common.h
tests_test_registry_CPPFLAGS = $(suite_cppflags)
tests_test_registry_CFLAGS = $(suite_cflags)
tests_test_registry_LDADD = $(suite_ldadd)
tests_test_numbers_SOURCES = tests/test-numbers.c tests/common.h
tests_test_numbers_CPPFLAGS = $(suite_cppflags)
tests_test_numbers_CFLAGS = $(suite_cflags)
tests_test_numbers_LDADD = $(suite_ldadd) lib/core/libparse.la
tests_test_files_SOURCES = tests/test-files.c tests/common.h
tests_test_files_CPPFLAGS = $(suite_cppflags)
tests_test_files_CFLAGS = $(suite_cflags)
tests_test_files_LDADD = $(suite_ldadd)
tests_test_topology_SOURCES = tests/test-topology.c tests/common.h
tests_test_topology_CPPFLAGS = $(suite_cppflags)
tests_test_topology_CFLAGS = $(suite_cflags)
tests_test_topology_LDADD = $(suite_ldadd)
tests_test_data_SOURCES = tests/test-data.c tests/common.h
tests_test_data_CPPFLAGS = $(suite_cppflags)
tests_test_data_CFLAGS = $(suite_cflags)
tests_test_data_LDADD = $(suite_ldadd)
tests_test_checkpoint_SOURCES = tests/test-checkpoint.c tests/common.h
tests_test_checkpoint_CPPFLAGS = $(suite_cppflags)
tests_test_checkpoint_CFLAGS = $(suite_cflags)
tests_test_checkpoint_LDADD = $(suite_ldadd)
tests_test_hf_SOURCES = tests/test-hf.c tests/common.h
tests_test_hf_CPPFLAGS = $(suite_cppflags)
tests_test_hf_CFLAGS = $(suite_cflags)
tests_test_hf_LDADD = $(suite_ldadd)
tests_test_hf_llama_SOURCES = tests/test-hf-llama.c tests/common.h
tests_test_hf_llama_CPPFLAGS = $(suite_cppflags)
tests_test_hf_llama_CFLAGS = $(suite_cflags)
tests_test_hf_llama_LDADD = $(suite_ldadd)
tests_test_comm_SOURCES = tests/test-comm.c tests/common.h
tests_test_comm_CPPFLAGS = $(suite_cppflags)
tests_test_comm_CFLAGS = $(suite_cflags)
tests_test_comm_LDADD = $(suite_ldadd)
tests_test_cluster_SOURCES = tests/test-cluster.c tests/common.h
tests_test_cluster_CPPFLAGS = $(suite_cppflags)
tests_test_cluster_CFLAGS = $(suite_cflags)
tests_test_cluster_LDADD = $(suite_ldadd)
tests_test_layout_SOURCES = tests/test-layout.c tests/common.h
tests_test_layout_CPPFLAGS = $(suite_cppflags)
tests_test_layout_CFLAGS = $(suite_cflags)
tests_test_layout_LDADD = $(suite_ldadd)
tests_test_schedule_SOURCES = tests/test-schedule.c tests/common.h
tests_test_schedule_CPPFLAGS = $(suite_cppflags)
tests_test_schedule_CFLAGS = $(suite_cflags)
tests_test_schedule_LDADD = $(suite_ldadd)
tests_test_parallel_SOURCES = tests/test-parallel.c tests/common.h
tests_test_parallel_CPPFLAGS = $(suite_cppflags)
tests_test_parallel_CFLAGS = $(suite_cflags)
tests_test_parallel_LDADD = $(suite_ldadd)
tests_test_seqpar_SOURCES = tests/test-seqpar.c tests/common.h
tests_test_seqpar_CPPFLAGS = $(suite_cppflags)
tests_test_seqpar_CFLAGS = $(suite_cflags)
tests_test_seqpar_LDADD = $(suite_ldadd)
tests_test_spatial_SOURCES = tests/test-spatial.c tests/common.h tests/spatial.h
tests_test_spatial_CPPFLAGS = $(suite_cppflags)
tests_test_spatial_CFLAGS = $(suite_cflags)
tests_test_spatial_LDADD = $(suite_ldadd)
tests_test_spatial_plan_SOURCES = tests/test-spatial-plan.c tests/common.h tests/spatial.h
tests_test_spatial_plan_CPPFLAGS = $(suite_cppflags)
tests_test_spatial_plan_CFLAGS = $(suite_cflags)
tests_test_spatial_plan_LDADD = $(suite_ldadd)
tests_test_train_SOURCES = tests/test-train.c tests/common.h
tests_test_train_CPPFLAGS = $(suite_cppflags)
tests_test_train_CFLAGS = $(suite_cflags)
tests_test_train_LDADD = $(suite_ldadd)
tests_test_llama_SOURCES = tests/test-llama.c tests/common.h
tests_test_llama_CPPFLAGS = $(suite_cppflags)
tests_test_llama_CFLAGS = $(suite_cflags)
tests_test_llama_LDADD = $(suite_ldadd)
tests_test_pipeline_SOURCES = tests/test-pipeline.c tests/common.h
tests_test_pipeline_CPPFLAGS = $(suite_cppflags)
tests_test_pipeline_CFLAGS = $(suite_cflags)
tests_test_pipeline_LDADD = $(suite_ldadd)
tests_test_plan_SOURCES = tests/test-plan.c tests/common.h
tests_test_plan_CPPFLAGS = $(suite_cppflags)
tests_test_plan_CFLAGS = $(suite_cflags)
tests_test_plan_LDADD = $(suite_ldadd)
# The memory model is internal: the suite compiles the model's stage code (and the error and log calls it makes)
# itself and takes everything public from the library.
tests_test_grads_SOURCES = tests/test-grads.c tests/common.h
tests_test_grads_CPPFLAGS = $(suite_cppflags) -I$(top_srcdir)/lib
tests_test_grads_CFLAGS = $(suite_cflags)
tests_test_grads_LDADD = $(suite_ldadd)
tests_test_memory_SOURCES = tests/test-memory.c tests/common.h lib/model/stage.c lib/model/layers.c lib/model/ranges.c \
	lib/model/slab.c lib/model/seqpar.c lib/model/tensor.c lib/model/llama.c \
	lib/model/window.c lib/model/grads.c \
	lib/core/status.c lib/core/log.c lib/core/time.c
tests_test_memory_CPPFLAGS = $(suite_cppflags) -I$(top_srcdir)/lib
tests_test_memory_CFLAGS = $(suite_cflags)
tests_test_memory_LDADD = $(suite_ldadd)
endif

# Fake backend modules for the registry tests: a "cuda" and an "opencl" whose
# devices share a PCI id, a stale module and one without the entry symbol.
EXTRA_DIST += tests/fake/backend.c tests/fake/gone.c tests/fake/comm.c tests/fake/fake-comm.h
if HAVE_CRITERION
fake_module_flags = -module -avoid-version -shared -rpath /nowhere -no-undefined
check_LTLIBRARIES = tests/fake/cuda/strata-cuda.la tests/fake/opencl/strata-opencl.la \
	tests/fake/stale/strata-host.la tests/fake/noentry/strata-host.la \
	tests/fake/gone/libstrata-test-gone.la tests/fake/unloadable/strata-cuda.la
tests_fake_cuda_strata_cuda_la_SOURCES = tests/fake/backend.c
tests_fake_cuda_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' \
	-DFAKE_PCI='"0000:3b:00.0", "0000:86:00.0"'
tests_fake_cuda_strata_cuda_la_LDFLAGS = $(fake_module_flags)
tests_fake_opencl_strata_opencl_la_SOURCES = tests/fake/backend.c
tests_fake_opencl_strata_opencl_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"opencl"' \
	-DFAKE_PCI='"0000:86:00.0", "0000:af:00.0", ""'
tests_fake_opencl_strata_opencl_la_LDFLAGS = $(fake_module_flags)
tests_fake_stale_strata_host_la_SOURCES = tests/fake/backend.c
tests_fake_stale_strata_host_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"host"' -DFAKE_PCI='""' -DFAKE_API_VERSION=999
tests_fake_stale_strata_host_la_LDFLAGS = $(fake_module_flags)
tests_fake_noentry_strata_host_la_SOURCES = tests/fake/backend.c
tests_fake_noentry_strata_host_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"host"' -DFAKE_PCI='""' -DFAKE_NO_ENTRY
tests_fake_noentry_strata_host_la_LDFLAGS = $(fake_module_flags)

# A "cuda" module that needs a library installed nowhere the loader looks:
# tests/gpu/run must fail on it, naming the library.
tests_fake_gone_libstrata_test_gone_la_SOURCES = tests/fake/gone.c
tests_fake_gone_libstrata_test_gone_la_LDFLAGS = -avoid-version -shared -rpath /nonexistent-strata-test-dir -no-undefined
tests_fake_unloadable_strata_cuda_la_SOURCES = tests/fake/backend.c
tests_fake_unloadable_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' -DFAKE_PCI='""' -DFAKE_NEEDS_GONE
# Passed to the linker past libtool, which would add the build directory of
# a library it knows to the RUNPATH; named before the object, so not --as-needed.
tests_fake_unloadable_strata_cuda_la_LDFLAGS = $(fake_module_flags) \
	-Wl,--no-as-needed,-Ltests/fake/gone/.libs,-lstrata-test-gone
tests_fake_unloadable_strata_cuda_la_DEPENDENCIES = tests/fake/gone/libstrata-test-gone.la

# A "cuda" module whose communicators span processes through a shared file
# (NCCL's part, played on CPUs): tests/test-mpi.sh runs the cluster's
# one-communicator path with it.
check_LTLIBRARIES += tests/fake/ccl/strata-cuda.la
tests_fake_ccl_strata_cuda_la_SOURCES = tests/fake/backend.c tests/fake/comm.c tests/fake/fake-comm.h
tests_fake_ccl_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' -DFAKE_PCI='"", ""' -DFAKE_COMM
tests_fake_ccl_strata_cuda_la_LDFLAGS = $(fake_module_flags)
endif

# The tools' tests (shell), the GPU suite's own test and the MPI ones.
TESTS += tests/test-strata-topo.sh tests/test-strata-plan.sh tests/test-strata-plan-bounds.sh \
	tests/test-strata-train.sh tests/test-strata-interop.sh tests/test-strata-train-dp.sh tests/test-gpu-run.sh \
	tests/test-layers.sh tests/test-version.sh tests/test-outputs.sh tests/test-fuzz-run-all.sh tests/test-strata-bench.sh
EXTRA_DIST += tests/test-strata-topo.sh tests/test-strata-plan.sh tests/test-strata-plan-bounds.sh \
	tests/test-strata-train.sh tests/test-strata-interop.sh tests/test-strata-train-dp.sh tests/test-gpu-run.sh \
	tests/test-layers.sh tests/test-version.sh tests/test-outputs.sh tests/test-fuzz-run-all.sh tests/test-strata-bench.sh
# The tests' own writer of nanoGPT and llm.c token files.
check_PROGRAMS += tests/write-tokens
tests_write_tokens_SOURCES = tests/write-tokens.c

# The cluster layer (strata/cluster.h): one rank's checks in tests/mpi-check, run by
# tests/test-mpi.sh under mpirun -np 2 and -np 4 when configure enabled MPI (alone otherwise).
check_PROGRAMS += tests/mpi-check
tests_mpi_check_SOURCES = tests/mpi-check.c
tests_mpi_check_LDADD = libstrata.la $(PTHREAD_LIBS) -lm
TESTS += tests/test-mpi.sh
EXTRA_DIST += tests/test-mpi.sh
# test-comm, test-parallel and test-seqpar again with host devices that have no gates, as CUDA devices outside NCCL have none.
TESTS += tests/test-no-gates.sh
EXTRA_DIST += tests/test-no-gates.sh
# Collectives across ranks on real CUDA devices (NCCL); skipped without one, run by tests/gpu/run.
TESTS += tests/test-mpi-nccl.sh
EXTRA_DIST += tests/test-mpi-nccl.sh

# Made once by make-fixture.py with transformers (never run by the build or the tests).
EXTRA_DIST += tests/fixtures/hf-gpt2/make-fixture.py \
	tests/fixtures/hf-gpt2/small/config.json tests/fixtures/hf-gpt2/small/generation_config.json \
	tests/fixtures/hf-gpt2/small/model.safetensors tests/fixtures/hf-gpt2/small/reference.safetensors \
	tests/fixtures/hf-gpt2/tied-50257/config.json tests/fixtures/hf-gpt2/tied-50257/generation_config.json \
	tests/fixtures/hf-gpt2/tied-50257/model.safetensors tests/fixtures/hf-gpt2/tied-50257/reference.safetensors \
	tests/fixtures/hf-gpt2/small-bf16/config.json tests/fixtures/hf-gpt2/small-bf16/generation_config.json \
	tests/fixtures/hf-gpt2/small-bf16/model.safetensors tests/fixtures/hf-gpt2/small-bf16/reference.safetensors \
	tests/fixtures/hf-gpt2/small-fp16/config.json tests/fixtures/hf-gpt2/small-fp16/generation_config.json \
	tests/fixtures/hf-gpt2/small-fp16/model.safetensors tests/fixtures/hf-gpt2/small-fp16/reference.safetensors
EXTRA_DIST += tests/fixtures/llama/make.py tests/fixtures/llama/check-export.py \
	tests/fixtures/llama/fp32/config.json tests/fixtures/llama/fp32/model.safetensors \
	tests/fixtures/llama/fp32/reference.safetensors \
	tests/fixtures/llama/bf16/config.json tests/fixtures/llama/bf16/model.safetensors \
	tests/fixtures/llama/bf16/reference.safetensors \
	tests/fixtures/llama/sharded-fp16/config.json tests/fixtures/llama/sharded-fp16/model.safetensors.index.json \
	tests/fixtures/llama/sharded-fp16/model-00001-of-00004.safetensors \
	tests/fixtures/llama/sharded-fp16/model-00002-of-00004.safetensors \
	tests/fixtures/llama/sharded-fp16/model-00003-of-00004.safetensors \
	tests/fixtures/llama/sharded-fp16/model-00004-of-00004.safetensors \
	tests/fixtures/llama/sharded-fp16/reference.safetensors \
	tests/fixtures/llama/llama3/config.json tests/fixtures/llama/llama3/reference.safetensors

# Real hwloc dumps (their provenance and licences in SOURCES.md; those named *-edited are real dumps edited to show
# a case, the edit written there), read by test-topology, test-plan, test-comm, test-strata-topo.sh,
# test-strata-plan.sh, test-strata-plan-bounds.sh and bench/plan.sh.
EXTRA_DIST += tests/fixtures/topologies/SOURCES.md \
	tests/fixtures/topologies/aws-g4dn-metal-t4-8gpu-pcie.xml \
	tests/fixtures/topologies/dell-xe8640-h100-4gpu-nvlink.xml \
	tests/fixtures/topologies/dell-xe8640-h100-4gpu-cgroup-even-nodes-edited.xml \
	tests/fixtures/topologies/hpe-ex235a-mi250x-8gcd-xgmi.xml \
	tests/fixtures/topologies/hpe-ex255a-mi300a-24part-cpx-xgmi.xml \
	tests/fixtures/topologies/hpe-ex255a-mi300a-4apu-spx-xgmi.xml \
	tests/fixtures/topologies/ibm-power8-minsky-p100-4gpu-nvlink.xml \
	tests/fixtures/topologies/ibm-power9-lassen-v100-4gpu.xml \
	tests/fixtures/topologies/ibm-power9-lassen-v100-4gpu-gpu-memory-two-owners-edited.xml \
	tests/fixtures/topologies/intel-broadwell-2s-cpu-only.xml \
	tests/fixtures/topologies/jureca-dc-a100-4gpu-pci-only.xml \
	tests/fixtures/topologies/jureca-dc-a100-4gpu-root-ports-1gbps-edited.xml \
	tests/fixtures/topologies/mixed-threadripper-gtx1070-vega-fe.xml \
	tests/fixtures/topologies/mixed-m2075-k40m-hd7970-edited.xml \
	tests/fixtures/topologies/nvidia-dgx2-v100-16gpu-nvswitch.xml \
	tests/fixtures/topologies/supermicro-epyc-mi50-8gpu-pcie.xml
