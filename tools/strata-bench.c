/* SPDX-License-Identifier: MIT */
/* strata-bench — measures strata's device layer against calling the libraries under it directly. */
#include "config.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr, dladdr */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef STRATA_BLAS_DNNL
#include <oneapi/dnnl/dnnl.h> /* types only: the functions come from the copy the host backend loaded */
#endif
#ifdef STRATA_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>
#endif

#include <strata/strata.h>

#include "cli.h"
#include "bench-comm.h"
#include "bench-cublas.h"
#include "bench-mpi.h"

#define MAX_SIZES 16

struct options {
  int device;             /* -1: every device */
  int sizes[MAX_SIZES];
  int nsizes;
  int reps;
  int json;
  int compare;            /* --compare: every CBLAS-like library on the machine beside strata */
  int bf16;               /* --precision bf16: bfloat16 A and B, float32 C */
  const char *user_coretype;  /* OPENBLAS_CORETYPE as the program started */
};

static void usage(FILE *f) {
  fprintf(f,
          "Usage: strata-bench gemm [OPTIONS]\n"
          "       strata-bench allreduce|allgather|reducescatter|broadcast [OPTIONS] (see its --help)\n"
          "       mpirun -np N strata-bench mpi [OPTIONS] (between ranks; see its --help)\n"
          "       strata-bench calibrate [--devices LIST] [--model M --rows LIST [--max-tp T]] [--out FILE] [--quiet]\n"
          "                          (costs for strata-plan --calibration)\n"
          "Measure SGEMM (C = A B, N x N, fp32) through strata's device layer beside the\n"
          "library strata calls underneath, on the same device in the same run:\n"
          "the host backend's GEMM library (OpenBLAS, BLIS, oneDNN: the very copy the\n"
          "backend loaded, called as cblas_sgemm or dnnl_sgemm) for host devices,\n"
          "CLBlast for OpenCL devices (on CPU devices strata runs its own kernels by\n"
          "default, STRATA_OPENCL_GEMM: the ratio is then their gain over CLBlast).\n"
          "The first line names the host library, its kernels and who chose them.\n"
          "\n"
          "Options:\n"
          "  -d, --device N     only device N (default: every device; see strata-topo)\n"
          "  -s, --sizes LIST   comma-separated N values (default 512,1024,2048)\n"
          "  -r, --reps R       timed repetitions per measurement, median reported (default 5)\n"
          "      --compare      also time every GEMM library installed here (OpenBLAS, BLIS,\n"
          "                     oneDNN's dnnl_sgemm, MKL, the libblas.so.3 alternative), each\n"
          "                     loaded privately with the host device's thread count, in the\n"
          "                     same run, in turn round by round; prints GFLOP/s per library\n"
          "                     and size and strata's share of the best (target: 90%%)\n"
          "  -p, --precision P  fp32 (default) or bf16: bfloat16 A and B with float32 sums and C,\n"
          "                     beside oneDNN's bf16 matmul on host devices and cuBLAS's\n"
          "                     cublasGemmEx (CUDA_R_16BF, CUBLAS_COMPUTE_32F) on CUDA devices,\n"
          "                     each called directly (target: strata >= 90%% of it); OpenCL\n"
          "                     devices run it with no direct comparison\n"
          "      --json         one JSON object per line instead of a table\n"
          "  -h, --help         this help\n"
          "      --version      show the version (strata-bench --version)\n"
          "\n"
          "Exit status: 0 on success, 1 if a measurement failed, 2 on bad usage (a --model that does not load\n"
          "included; a model file that cannot be read is 1).\n");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_sizes(const char *s, struct options *o) {
  o->nsizes = 0;
  for (const char *p = s;;) {
    /* every item a number: no empty ones ("1,,2"), nothing after them */
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[16];
    int64_t v = 0;
    if (len >= sizeof item || o->nsizes == MAX_SIZES)
      return -1;
    memcpy(item, p, len);
    item[len] = '\0';
    if (strata__parse_int(item, 1, 32768, &v))
      return -1;
    o->sizes[o->nsizes++] = (int)v;
    if (!comma)
      return 0;
    p = comma + 1;
  }
}

/*
** One way of running an N x N SGEMM, set up once and then timed call by
** call. The strata and direct runners of a device are timed alternately,
** call for call, so that load from elsewhere on a shared machine falls on
** both alike.
*/
struct peer;

struct runner {
  int (*run)(struct runner *r);   /* one GEMM, waited for; 0 on success */
  void (*done)(struct runner *r);
  int n;
  strata_queue_t q;               /* strata */
  strata_buffer_t ba, bb, bc;
  const float *a, *b;             /* cblas */
  float *c;
  const struct peer *peer;        /* --compare: the library called */
  int dtype;                      /* strata: the type of A and B (C is float32) */
  struct bench_cublas *cublas;    /* cuBLAS, CUDA devices */
#ifdef STRATA_BLAS_DNNL
  dnnl_engine_t eng;              /* oneDNN matmul, --precision bf16 */
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  dnnl_memory_t dm[3];
  void *host[3];
#endif
#ifdef STRATA_HAVE_OPENCL
  cl_context ctx;                 /* CLBlast */
  cl_command_queue cq;
  cl_mem ma, mb, mc;
#endif
};

static int strata_run(struct runner *r) {
  int n = r->n;
  int rc = strata_gemm(r->q, STRATA_NO_TRANS, STRATA_NO_TRANS, n, n, n, 1.0f, strata_mem_typed(r->ba, 0, r->dtype), n,
                       0, strata_mem_typed(r->bb, 0, r->dtype), n, 0, 0.0f, strata_mem(r->bc, 0), n, 0, 1);
  return rc ? rc : strata_queue_finish(r->q);
}

static void strata_done(struct runner *r) {
  /* The queue first: freeing it waits for uploads still queued when a setup step failed. */
  strata_queue_free(r->q);
  strata_buffer_free(r->ba);
  strata_buffer_free(r->bb);
  strata_buffer_free(r->bc);
}

/* With bf16, A and B are uploaded as float32 into C's buffer and converted by strata_convert. */
static int strata_setup(struct runner *r, int dev, int n, const float *a, const float *b, int bf16) {
  size_t count = (size_t)n * n, bytes = count * 4, ab = bf16 ? count * 2 : bytes;
  memset(r, 0, sizeof *r);
  r->n = n;
  r->run = strata_run;
  r->done = strata_done;
  r->dtype = bf16 ? STRATA_BFLOAT16 : STRATA_FLOAT32;
  int rc = strata_queue_new(dev, &r->q);
  if (!rc)
    rc = strata_buffer_new(dev, ab, &r->ba);
  if (!rc)
    rc = strata_buffer_new(dev, ab, &r->bb);
  if (!rc)
    rc = strata_buffer_new(dev, bytes, &r->bc);
  for (int i = 0; i < 2 && !rc; i++) {
    strata_buffer_t to = i ? r->bb : r->ba;
    rc = strata_buffer_upload(r->q, bf16 ? r->bc : to, 0, i ? b : a, bytes);
    if (!rc && bf16)
      rc = strata_convert(r->q, strata_mem(r->bc, 0), strata_mem_typed(to, 0, STRATA_BFLOAT16), (int64_t)count);
    if (!rc && bf16)
      rc = strata_queue_finish(r->q); /* C's buffer is the next one's staging */
  }
  return rc;
}

/*
** The host backend's GEMM, called directly: the library the backend's module
** brought in (found among the loaded objects by its entry symbol, so it is
** the same copy with the same kernels, not a second one linked here).
*/
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                               const float *b, int ldb, float beta, float *c, int ldc);
typedef int (*dnnl_sgemm_fn)(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
static struct {
  cblas_sgemm_fn cblas;
  dnnl_sgemm_fn dnnl;
  char file[512];
  void *handle;
} host_blas;

/* After the registry loaded the host module: find its GEMM library; 0 if it is loaded. */
static int find_host_blas(void) {
  if (host_blas.handle)
    return 0;
#ifdef STRATA_BLAS_DNNL
  const char *entry = "dnnl_sgemm";
#else
  const char *entry = "cblas_sgemm";
#endif
  host_blas.handle = strata_bench_find_loaded(entry, host_blas.file, sizeof host_blas.file);
  if (!host_blas.handle)
    return -1;
  void *sym = dlsym(host_blas.handle, entry);
#ifdef STRATA_BLAS_DNNL
  host_blas.dnnl = (dnnl_sgemm_fn)(uintptr_t)sym;
#else
  host_blas.cblas = (cblas_sgemm_fn)(uintptr_t)sym;
#endif
  return 0;
}

/* One line: which library, which kernels, who chose them (`user_coretype`: OPENBLAS_CORETYPE before strata ran). */
static void print_host_blas(const char *user_coretype) {
  if (find_host_blas()) {
    printf("host GEMM: library not found among the loaded objects\n");
    return;
  }
  printf("host GEMM: %s", host_blas.file);
  char *(*corename)(void) = (char *(*)(void))(uintptr_t)dlsym(host_blas.handle, "openblas_get_corename");
  char *(*config)(void) = (char *(*)(void))(uintptr_t)dlsym(host_blas.handle, "openblas_get_config");
  if (corename) {
    const char *now = getenv("OPENBLAS_CORETYPE");
    printf(" (%s), %s kernels", config ? config() : "OpenBLAS", corename());
    if (user_coretype && *user_coretype)
      printf(", OPENBLAS_CORETYPE=%s set by the user", user_coretype);
    else if (now && *now)
      printf(", OPENBLAS_CORETYPE=%s chosen by strata from the CPU's feature flags", now);
    else
      printf(", chosen by OpenBLAS from the CPU model");
  } else if (host_blas.dnnl) {
    printf(" (oneDNN dnnl_sgemm, kernels generated for this CPU at run time)");
  }
  printf("\n");
}

static int cblas_run(struct runner *r) {
  int n = r->n;
  if (host_blas.dnnl)
    return host_blas.dnnl('N', 'N', n, n, n, 1.0f, r->a, n, r->b, n, 0.0f, r->c, n) == 0 ? 0 : -1;
  /* CBLAS's enum values: CblasRowMajor 101, CblasNoTrans 111 */
  host_blas.cblas(101, 111, 111, n, n, n, 1.0f, r->a, n, r->b, n, 0.0f, r->c, n);
  return 0;
}

static void cblas_done(struct runner *r) { free(r->c); }

static int cblas_setup(struct runner *r, int n, const float *a, const float *b) {
  memset(r, 0, sizeof *r);
  if (find_host_blas())
    return -1;
  r->n = n;
  r->run = cblas_run;
  r->done = cblas_done;
  r->a = a;
  r->b = b;
  r->c = malloc((size_t)n * n * 4);
  return r->c ? 0 : -1;
}

#ifdef STRATA_BLAS_DNNL
/*
** --precision bf16 on host devices: oneDNN's matmul with bf16 src and
** weights and f32 dst, N x N row-major, called directly through the copy of
** oneDNN the host backend loaded (its functions looked up in it).
*/
#define DNNL_FN(name) __typeof__(name) *name##_p = (__typeof__(name) *)(uintptr_t)dlsym(host_blas.handle, #name)

static int dnnl_bf16_run(struct runner *r) {
  DNNL_FN(dnnl_primitive_execute);
  DNNL_FN(dnnl_stream_wait);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, r->dm[0]}, {DNNL_ARG_WEIGHTS, r->dm[1]}, {DNNL_ARG_DST, r->dm[2]}};
  return dnnl_primitive_execute_p(r->prim, r->stream, 3, args) == dnnl_success &&
                 dnnl_stream_wait_p(r->stream) == dnnl_success
             ? 0
             : -1;
}

static void dnnl_bf16_done(struct runner *r) {
  DNNL_FN(dnnl_memory_destroy);
  DNNL_FN(dnnl_primitive_destroy);
  DNNL_FN(dnnl_stream_destroy);
  DNNL_FN(dnnl_engine_destroy);
  for (int i = 0; i < 3; i++) {
    if (r->dm[i])
      dnnl_memory_destroy_p(r->dm[i]);
    free(r->host[i]);
  }
  if (r->prim)
    dnnl_primitive_destroy_p(r->prim);
  if (r->stream)
    dnnl_stream_destroy_p(r->stream);
  if (r->eng)
    dnnl_engine_destroy_p(r->eng);
}

static int dnnl_bf16_setup(struct runner *r, int n, const float *a, const float *b) {
  memset(r, 0, sizeof *r);
  if (find_host_blas() || !host_blas.dnnl)
    return -1;
  r->n = n;
  r->run = dnnl_bf16_run;
  r->done = dnnl_bf16_done;
  DNNL_FN(dnnl_engine_create);
  DNNL_FN(dnnl_stream_create);
  DNNL_FN(dnnl_memory_desc_init_by_tag);
  DNNL_FN(dnnl_matmul_desc_init);
  DNNL_FN(dnnl_primitive_desc_create);
  DNNL_FN(dnnl_primitive_desc_destroy);
  DNNL_FN(dnnl_primitive_create);
  DNNL_FN(dnnl_memory_create);
  size_t count = (size_t)n * n;
  uint16_t *ha = malloc(count * 2), *hb = malloc(count * 2);
  r->host[0] = ha, r->host[1] = hb, r->host[2] = malloc(count * 4);
  if (!ha || !hb || !r->host[2])
    return -1;
  for (size_t i = 0; i < count; i++)
    ha[i] = strata_bench_to_bf16(a[i]), hb[i] = strata_bench_to_bf16(b[i]);
  dnnl_dims_t dims = {n, n};
  dnnl_memory_desc_t md[3];
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_engine_create_p(&r->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create_p(&r->stream, r->eng, dnnl_stream_default_flags) != dnnl_success)
    return -1;
  for (int i = 0; i < 3; i++)
    if (dnnl_memory_desc_init_by_tag_p(&md[i], 2, dims, i < 2 ? dnnl_bf16 : dnnl_f32, dnnl_ab) != dnnl_success)
      return -1;
  if (dnnl_matmul_desc_init_p(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success ||
      dnnl_primitive_desc_create_p(&pd, &desc, NULL, r->eng, NULL) != dnnl_success)
    return -1;
  int rc = dnnl_primitive_create_p(&r->prim, pd) == dnnl_success ? 0 : -1;
  dnnl_primitive_desc_destroy_p(pd);
  for (int i = 0; i < 3 && !rc; i++)
    rc = dnnl_memory_create_p(&r->dm[i], &md[i], r->eng, r->host[i]) == dnnl_success ? 0 : -1;
  return rc;
}
#endif

/* CUDA devices: cuBLAS's cublasGemmEx through the copy the CUDA module loaded (bench-cublas.c). */
static int cublas_run(struct runner *r) { return strata_bench_cublas_run(r->cublas); }

static void cublas_done(struct runner *r) { strata_bench_cublas_close(r->cublas); }

static int cublas_setup(struct runner *r, int ordinal, int n, const float *a, const float *b, int bf16) {
  memset(r, 0, sizeof *r);
  r->n = n;
  r->run = cublas_run;
  r->done = cublas_done;
  return strata_bench_cublas_open(ordinal, n, a, b, bf16, &r->cublas);
}

#ifdef STRATA_HAVE_OPENCL
/* The OpenCL device strata calls `backend_index`: platforms in order, then
** their devices in order — the order the OpenCL backend enumerates them. */
static cl_device_id find_cl_device(int backend_index) {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
    return NULL;
  cl_platform_id plats[16];
  if (np > 16)
    np = 16;
  clGetPlatformIDs(np, plats, NULL);
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS)
      continue;
    cl_device_id devs[64];
    if (nd > 64)
      nd = 64;
    clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL);
    if (backend_index < (int)nd)
      return devs[backend_index];
    backend_index -= (int)nd;
  }
  return NULL;
}

static int clblast_run(struct runner *r) {
  size_t n = (size_t)r->n;
  CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, n, n, n, 1.0f,
                                     r->ma, 0, n, r->mb, 0, n, 0.0f, r->mc, 0, n, &r->cq, NULL);
  return (s != CLBlastSuccess || clFinish(r->cq) != CL_SUCCESS) ? -1 : 0;
}

static void clblast_done(struct runner *r) {
  if (r->ma)
    clReleaseMemObject(r->ma);
  if (r->mb)
    clReleaseMemObject(r->mb);
  if (r->mc)
    clReleaseMemObject(r->mc);
  if (r->cq)
    clReleaseCommandQueue(r->cq);
  if (r->ctx)
    clReleaseContext(r->ctx);
}

static int clblast_setup(struct runner *r, int backend_index, int n, const float *a, const float *b) {
  memset(r, 0, sizeof *r);
  r->n = n;
  r->run = clblast_run;
  r->done = clblast_done;
  cl_device_id dev = find_cl_device(backend_index);
  if (!dev)
    return -1;
  cl_int err;
  r->ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS)
    return -1;
  r->cq = clCreateCommandQueue(r->ctx, dev, 0, &err);
  size_t bytes = (size_t)n * n * 4;
  r->ma = clCreateBuffer(r->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)a, &err);
  r->mb = clCreateBuffer(r->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)b, &err);
  r->mc = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  return (r->cq && r->ma && r->mb && r->mc) ? 0 : -1;
}
#endif /* STRATA_HAVE_OPENCL */

/* Alternate the two runners `reps` times after one warm-up call each (kernel
** compilation, caches); median seconds of each. `direct` may be NULL. */
static int time_pair(struct runner *strata, struct runner *direct, int reps, double *ts, double *td) {
  double a[64], b[64];
  for (int r = -1; r < reps; r++) {
    double t0 = now();
    int rc = strata->run(strata);
    double t1 = now();
    if (rc)
      return rc;
    if (direct && direct->run(direct))
      direct = NULL; /* report strata alone */
    double t2 = now();
    if (r >= 0) {
      a[r] = t1 - t0;
      b[r] = t2 - t1;
    }
  }
  *ts = median(a, reps);
  *td = direct ? median(b, reps) : 0;
  return direct ? 0 : 1;
}

/*
** --compare: the GEMM libraries of the machine, each loaded on its own
** (RTLD_DEEPBIND: its calls bind to itself, not to a copy already loaded)
** and run with the thread count strata's host device has. A library that
** is the copy strata's backend loaded is the same object, with the kernels
** strata chose for it.
*/
#define MAX_PEERS 8
/* ASan and its kin refuse RTLD_DEEPBIND (their interceptors must bind first): there each library is loaded without
** it, which changes nothing for a library that calls only itself */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PEER_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define PEER_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#endif
#endif
#ifndef PEER_DLOPEN_FLAGS
#define PEER_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif
struct peer {
  const char *label;
  char file[512];                 /* the resolved path: one entry per distinct object */
  void *handle;
  cblas_sgemm_fn cblas;
  dnnl_sgemm_fn dnnl;
  int strata_s;                   /* the object strata's host backend calls */
};
static struct peer peers[MAX_PEERS];
static int npeers = -1;

static void peers_load(void) {
  static const struct {
    const char *label, *soname, *sym;
  } known[] = {
      {"OpenBLAS", "libopenblas.so.0", "cblas_sgemm"},   {"BLIS", "libblis.so.4", "cblas_sgemm"},
      {"BLIS", "libblis.so.3", "cblas_sgemm"},           {"oneDNN", "libdnnl.so.2", "dnnl_sgemm"},
      {"oneDNN", "libdnnl.so.3", "dnnl_sgemm"},          {"MKL", "libmkl_rt.so.2", "cblas_sgemm"},
      {"MKL", "libmkl_rt.so", "cblas_sgemm"},            {"libblas.so.3", "libblas.so.3", "cblas_sgemm"},
  };
  if (npeers >= 0)
    return;
  npeers = 0;
  char strata_file[512] = "";
  if (!find_host_blas() && !realpath(host_blas.file, strata_file))
    snprintf(strata_file, sizeof strata_file, "%s", host_blas.file);
  for (size_t k = 0; k < sizeof known / sizeof known[0] && npeers < MAX_PEERS; k++) {
    void *h = dlopen(known[k].soname, PEER_DLOPEN_FLAGS);
    if (!h)
      continue;
    void *sym = dlsym(h, known[k].sym);
    Dl_info where;
    char file[512];
    if (!sym || !dladdr(sym, &where) || !where.dli_fname || !realpath(where.dli_fname, file)) {
      dlclose(h);
      continue;
    }
    int seen = 0;
    for (int i = 0; i < npeers; i++)
      seen |= strcmp(peers[i].file, file) == 0;
    if (seen) { /* libblas.so.3 is often an alternative pointing at one of the others */
      dlclose(h);
      continue;
    }
    struct peer *p = &peers[npeers++];
    p->label = known[k].label;
    snprintf(p->file, sizeof p->file, "%s", file);
    p->handle = h;
    if (strcmp(known[k].sym, "dnnl_sgemm") == 0)
      p->dnnl = (dnnl_sgemm_fn)(uintptr_t)sym;
    else
      p->cblas = (cblas_sgemm_fn)(uintptr_t)sym;
    p->strata_s = strcmp(file, strata_file) == 0;
  }
}

/* Each library's own way of setting its thread count (OpenMP's for oneDNN and an OpenMP BLIS). */
static void peers_threads(int n) {
  for (int i = 0; i < npeers; i++) {
    void (*openblas)(int) = (void (*)(int))(uintptr_t)dlsym(peers[i].handle, "openblas_set_num_threads");
    void (*blis)(long) = (void (*)(long))(uintptr_t)dlsym(peers[i].handle, "bli_thread_set_num_threads");
    void (*omp)(int) = (void (*)(int))(uintptr_t)dlsym(peers[i].handle, "omp_set_num_threads");
    void (*mkl)(int) = (void (*)(int))(uintptr_t)dlsym(peers[i].handle, "MKL_Set_Num_Threads");
    if (peers[i].strata_s)
      continue; /* strata's own copy keeps what the backend set */
    if (openblas)
      openblas(n);
    if (blis)
      blis(n);
    if (mkl)
      mkl(n);
    if (omp)
      omp(n);
  }
}

static int peer_run(struct runner *r) {
  const struct peer *p = r->peer;
  int n = r->n;
  if (p->dnnl)
    return p->dnnl('N', 'N', n, n, n, 1.0f, r->a, n, r->b, n, 0.0f, r->c, n) == 0 ? 0 : -1;
  p->cblas(101, 111, 111, n, n, n, 1.0f, r->a, n, r->b, n, 0.0f, r->c, n);
  return 0;
}

/*
** strata and every peer in turn, `reps` rounds; medians into t[0] (strata)
** and t[1 + i]. Each turn makes one untimed call first: the library's
** threads slept while the others ran, and waking them is not its speed.
*/
static int time_peers(struct runner *strata, struct runner *pr, int reps, double *t) {
  double v[1 + MAX_PEERS][64];
  for (int r = 0; r < reps; r++) {
    for (int i = -1; i < npeers; i++) {
      struct runner *x = i < 0 ? strata : &pr[i];
      int rc = x->run(x);
      double t0 = now();
      if (!rc)
        rc = x->run(x);
      double t1 = now();
      if (rc)
        return i < 0 ? rc : -1;
      v[1 + i][r] = t1 - t0;
    }
  }
  for (int i = 0; i <= npeers; i++)
    t[i] = median(v[i], reps);
  return 0;
}

/* The --compare table (or JSON lines) for host device `d` over every size. */
static int bench_compare(const struct options *o, int d, const struct strata_device_props *p) {
  peers_load();
  peers_threads(p->compute_units > 0 ? p->compute_units : 1);
  if (!o->json) {
    printf("\n# GEMM libraries on this machine beside strata, device %d, %d thread%s each, medians of %d rounds in turn\n",
           d, p->compute_units, p->compute_units == 1 ? "" : "s", o->reps);
    for (int i = 0; i < npeers; i++)
      printf("#   %-12s %s%s\n", peers[i].label, peers[i].file, peers[i].strata_s ? " (the copy strata calls)" : "");
    printf("%6s %12s", "N", "strata");
    for (int i = 0; i < npeers; i++)
      printf(" %12s", peers[i].label);
    printf(" %8s  %s\n", "share", "best");
  }
  int failed = 0;
  for (int s = 0; s < o->nsizes; s++) {
    int n = o->sizes[s];
    size_t count = (size_t)n * n;
    float *a = malloc(count * 4), *b = malloc(count * 4);
    struct runner rs_, pr[MAX_PEERS];
    int ok = a && b, made = 0;
    for (size_t i = 0; ok && i < count; i++) {
      a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
      b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    int rs = ok ? strata_setup(&rs_, d, n, a, b, 0) : -1;
    for (; ok && made < npeers; made++) {
      memset(&pr[made], 0, sizeof pr[made]);
      pr[made].n = n;
      pr[made].run = peer_run;
      pr[made].done = cblas_done;
      pr[made].a = a;
      pr[made].b = b;
      pr[made].peer = &peers[made];
      pr[made].c = malloc(count * 4);
      if (!pr[made].c) {
        ok = 0;
        break;
      }
    }
    double t[1 + MAX_PEERS] = {0};
    int rc = ok && !rs ? time_peers(&rs_, pr, o->reps, t) : -1;
    if (ok)
      rs_.done(&rs_);
    for (int i = 0; i < made; i++)
      free(pr[i].c);
    free(a);
    free(b);
    if (rc) {
      fprintf(stderr, "strata-bench: --compare, device %d, N = %d: %s\n", d, n,
              rc == -1 && ok ? "a library's GEMM failed" : strata_last_error());
      failed = 1;
      continue;
    }
    double flops = 2.0 * n * (double)n * n, gs = flops / t[0] / 1e9, best = 0;
    int bi = -1;
    for (int i = 0; i < npeers; i++)
      if (flops / t[1 + i] / 1e9 > best) {
        best = flops / t[1 + i] / 1e9;
        bi = i;
      }
    double share = best > 0 ? gs / best : 0;
    if (o->json) {
      printf("{\"bench\":\"gemm_compare\",\"device\":%d,\"n\":%d,\"threads\":%d,\"strata_gflops\":%.3f,\"libraries\":[",
             d, n, p->compute_units, gs);
      for (int i = 0; i < npeers; i++)
        printf("%s{\"name\":\"%s\",\"file\":\"%s\",\"strata_calls\":%s,\"gflops\":%.3f}", i ? "," : "",
               peers[i].label, peers[i].file, peers[i].strata_s ? "true" : "false", flops / t[1 + i] / 1e9);
      printf("],\"best\":%s%s%s,\"best_gflops\":%.3f,\"share\":%.4f}\n", bi >= 0 ? "\"" : "",
             bi >= 0 ? peers[bi].label : "null", bi >= 0 ? "\"" : "", best, share);
    } else {
      printf("%6d %12.2f", n, gs);
      for (int i = 0; i < npeers; i++)
        printf(" %12.2f", flops / t[1 + i] / 1e9);
      printf(" %7.1f%%  %s\n", 100 * share, bi >= 0 ? peers[bi].label : "-");
    }
    fflush(stdout);
  }
  return failed;
}

static int bench_gemm(const struct options *o) {
  int ndev = 0;
  int drc = strata_device_count(&ndev);
  if (drc) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    return cli_device_status(drc);
  }
  if (o->device >= ndev) {
    fprintf(stderr, "strata-bench: no device %d (there are %d)\n", o->device, ndev);
    return 2;
  }
  find_host_blas();
  if (!o->json) {
    print_host_blas(o->user_coretype);
    printf("%-4s %-8s %-44s %6s %14s %14s %8s  %s\n", "dev", "backend", "name", "N", "strata GF/s", "direct GF/s",
           "ratio", "direct = ");
  }
  int failed = 0;
  for (int d = 0; d < ndev; d++) {
    if (o->device >= 0 && d != o->device)
      continue;
    struct strata_device_props p;
    strata_device_props(d, &p);
    int host = strcmp(p.backend, "host") == 0, cuda = strcmp(p.backend, "cuda") == 0;
    const char *direct = host                               ? (host_blas.dnnl ? "oneDNN dnnl_sgemm" : "host cblas_sgemm")
                         : strcmp(p.backend, "opencl") == 0 ? "CLBlast CLBlastSgemm"
                         : cuda                             ? "cuBLAS cublasGemmEx f32"
                                                            : NULL;
    if (o->bf16)
      direct = host && host_blas.dnnl ? "oneDNN matmul bf16:bf16:f32"
               : cuda                 ? "cuBLAS cublasGemmEx bf16:bf16:f32"
                                      : NULL;
    if (cuda && !o->json) {
      const char *file = strata_bench_cublas_file();
      printf("cuda GEMM: %s\n", file ? file : "cuBLAS not found among the loaded objects");
    }
    for (int s = 0; s < o->nsizes; s++) {
      int n = o->sizes[s];
      size_t count = (size_t)n * n;
      float *a = malloc(count * 4), *b = malloc(count * 4);
      if (!a || !b) {
        fprintf(stderr, "strata-bench: out of memory for N = %d\n", n);
        free(a);
        free(b);
        return 1;
      }
      for (size_t i = 0; i < count; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
      }
      double ts = 0, td = 0;
      struct runner rs_, rd_ = {0};
      int rs = strata_setup(&rs_, d, n, a, b, o->bf16), have_direct = -1;
      if (cuda)
        have_direct = cublas_setup(&rd_, p.backend_index, n, a, b, o->bf16);
      else if (o->bf16) {
#ifdef STRATA_BLAS_DNNL
        if (host)
          have_direct = dnnl_bf16_setup(&rd_, n, a, b);
#endif
      } else if (host)
        have_direct = cblas_setup(&rd_, n, a, b);
#ifdef STRATA_HAVE_OPENCL
      else if (strcmp(p.backend, "opencl") == 0)
        have_direct = clblast_setup(&rd_, p.backend_index, n, a, b);
#endif
      int rd = -1;
      if (!rs) {
        int pr = time_pair(&rs_, have_direct == 0 ? &rd_ : NULL, o->reps, &ts, &td);
        rs = pr < 0 || pr > 1 ? pr : 0;
        rd = pr == 0 ? 0 : -1;
      }
      rs_.done(&rs_);
      if (have_direct >= 0 || (o->bf16 && rd_.done))
        rd_.done(&rd_);
      free(a);
      free(b);
      if (rs) {
        fprintf(stderr, "strata-bench: device %d, N = %d: %s\n", d, n, strata_last_error());
        failed = 1;
        continue;
      }
      double flops = 2.0 * n * (double)n * n;
      double gs = flops / ts / 1e9, gd = rd == 0 ? flops / td / 1e9 : 0;
      if (o->json)
        printf("{\"bench\":\"gemm\",\"device\":%d,\"backend\":\"%s\",\"name\":\"%s\",\"precision\":\"%s\","
               "\"n\":%d,\"strata_gflops\":%.3f,\"direct\":%s%s%s,\"direct_gflops\":%.3f,\"ratio\":%.4f}\n",
               d, p.backend, p.name, o->bf16 ? "bf16" : "fp32", n, gs, direct ? "\"" : "", direct ? direct : "null",
               direct ? "\"" : "", gd, rd == 0 ? gs / gd : 0.0);
      else if (rd == 0)
        printf("%-4d %-8s %-44.44s %6d %14.2f %14.2f %7.1f%%  %s\n", d, p.backend, p.name, n, gs, gd, 100 * gs / gd,
               direct);
      else
        printf("%-4d %-8s %-44.44s %6d %14.2f %14s %8s  %s\n", d, p.backend, p.name, n, gs, "-", "-",
               "no direct comparison for this backend");
      fflush(stdout);
    }
  }
  /* --compare: the first host device (or the one asked for), after the pairs above */
  for (int d = 0; o->compare && d < ndev; d++) {
    struct strata_device_props p;
    if ((o->device >= 0 && d != o->device) || strata_device_props(d, &p) || strcmp(p.backend, "host") != 0)
      continue;
    failed |= bench_compare(o, d, &p);
    break;
  }
  return failed;
}

/* calibrate's progress on stderr: the library's "calibrate" messages, one line each. */
static void calibrate_progress(int level, const char *subsystem, const char *message, void *userdata) {
  (void)userdata;
  if (level <= STRATA_LOG_INFO && strcmp(subsystem, "calibrate") == 0)
    fprintf(stderr, "strata-bench: calibrate: %s\n", message);
}

/*
** strata-bench calibrate [--devices LIST] [--model M --rows LIST [--max-tp T]] [--out FILE] [--quiet]: measure this
** machine's devices and links for the planner and write the JSON cache
** (default $XDG_CACHE_HOME/strata/calibration.json, else
** ~/.cache/strata/calibration.json), which strata-plan --calibration reads.
*/
static int calibrate_main(int argc, char **argv) {
  static const struct option longopts[] = {{"devices", required_argument, NULL, 'd'},
                                           {"out", required_argument, NULL, 'o'},
                                           {"model", required_argument, NULL, 'm'},
                                           {"rows", required_argument, NULL, 'r'},
                                           {"max-tp", required_argument, NULL, 't'},
                                           {"quiet", no_argument, NULL, 'q'},
                                           {"precision", required_argument, NULL, 'p'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  const char *out = NULL, *list = NULL, *model_name = NULL, *rows_list = NULL;
  int64_t max_tp = 1;
  int c, quiet = 0, bf16 = 0;
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":d:o:m:r:t:p:qh", longopts, NULL)) != -1) {
    switch (c) {
    case 'q': quiet = 1; break;
    case 'p':
      if (strcmp(optarg, "bf16") != 0 && strcmp(optarg, "fp32") != 0) {
        fprintf(stderr, "strata-bench: calibrate: --precision wants fp32 or bf16, not '%s'\n", optarg);
        return 2;
      }
      bf16 = strcmp(optarg, "bf16") == 0;
      break;
    case 'd': list = optarg; break;
    case 'o': out = optarg; break;
    case 'm': model_name = optarg; break;
    case 'r': rows_list = optarg; break;
    case 't':
      if (cli_parse_range("strata-bench", "--max-tp", optarg, 1, 1024, &max_tp))
        return 2;
      break;
    case 'h':
      printf("Usage: strata-bench calibrate [--devices LIST] [--model M --rows LIST [--max-tp T]] [--precision P] "
             "[--out FILE] [--quiet]\n"
             "Measure each device's fp32 GEMM speed (N = 32 to 1024), the per-element speed of the row ops\n"
             "(add, GELU, layernorm, softmax, AdamW), memory bandwidth and launch overhead, a copy and a small\n"
             "all-reduce between every pair, and the host cores the CPU devices get together, for\n"
             "strata-plan --calibration. Writes FILE (default\n"
             "$XDG_CACHE_HOME/strata/calibration.json or ~/.cache/strata/calibration.json).\n"
             "\n"
             "  -d, --devices LIST  runtime devices to measure (default: all; see strata-topo)\n"
             "  -m, --model M       also time the GEMMs that strata-plan costs model M's layers with (a preset\n"
             "                      or a JSON file), so that a simulation of M meets their own speeds; for a\n"
             "                      GPT, also its stage probe: one block's loss and gradient as the runtime\n"
             "                      runs it, against its ops' figures (each device's stage factor)\n"
             "  -r, --rows LIST     with --model: samples per micro-batch to time them for, e.g. 2,4\n"
             "  -t, --max-tp T      with --model: tensor-parallel degrees 1 to T that divide the heads (default 1)\n"
             "  -p, --precision P   fp32 (default) or bf16: bf16 also times each device's bf16 GEMMs (A and B\n"
             "                      bfloat16, sums and C float32; N = 128 to 1024) as \"bf16_gflops\" and\n"
             "                      \"bf16_gemm\", which strata-plan --precision bf16 needs of a calibration\n"
             "  -o, --out FILE      where to write the JSON\n"
             "  -q, --quiet         no progress on stderr (each phase as it starts, with the seconds since the\n"
             "                      start; STRATA_LOG, when set, decides instead), only errors\n");
      return 0;
    default:
      cli_refuse("strata-bench", c == ':' ? ':' : '?', argc, argv);
      return 2;
    }
  }
  if (cli_refuse("strata-bench", 0, argc, argv))
    return 2;
  if (!model_name != !rows_list) {
    fprintf(stderr, "strata-bench: calibrate: --model and --rows go together\n");
    return 2;
  }
  if (max_tp > 1 && !model_name) {
    fprintf(stderr, "strata-bench: calibrate: --max-tp needs --model\n");
    return 2;
  }
  int *row_list = NULL, nrows = 0;
  if (rows_list && cli_parse_list("strata-bench", "--rows", rows_list, 1, 1 << 20, &row_list, &nrows))
    return 2;
  if (rows_list && nrows == 0) {
    fprintf(stderr, "strata-bench: calibrate: --rows '%s' lists no size\n", rows_list);
    free(row_list);
    return 2;
  }
  int64_t *rows = calloc((size_t)nrows + 1, sizeof *rows); /* the library counts samples in 64 bits */
  if (!rows) {
    fprintf(stderr, "strata-bench: out of memory\n");
    free(row_list);
    return 1;
  }
  for (int i = 0; i < nrows; i++)
    rows[i] = row_list[i];
  free(row_list);
  strata_model_t model = NULL;
  int lrc = model_name ? strata_model_load(model_name, &model) : 0;
  if (lrc) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    free(rows);
    return cli_model_status(lrc); /* 2 for what the name or file says, 1 for a file that cannot be read */
  }
  int *devs = NULL, n = 0;
  if (list && cli_parse_list("strata-bench", "--devices", list, 0, 65535, &devs, &n)) {
    free(rows);
    strata_model_free(model);
    return 2;
  }
  char path[4096];
  if (!out) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
      snprintf(path, sizeof path, "%s/strata", xdg);
    else
      snprintf(path, sizeof path, "%s/.cache/strata", home ? home : ".");
    char parent[4096];
    snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(path, '/') - path), path);
    mkdir(parent, 0755);
    mkdir(path, 0755);
    strncat(path, "/calibration.json", sizeof path - strlen(path) - 1);
    out = path;
  }
  /* before minutes of measuring: --out is no special file, nor the --model file */
  const struct strata_file_use files[] = {{.path = model_name, .what = "--model"},
                                          {.path = out, .what = "--out", .output = 1}};
  if (strata_file_preflight(files, 2)) {
    fprintf(stderr, "strata-bench: calibrate: %s\n", strata_last_error());
    strata_model_free(model);
    free(rows);
    free(devs);
    return 2;
  }
  /* progress on stderr, unless --quiet, or STRATA_LOG set (the library's own logging then decides) */
  const char *log = getenv("STRATA_LOG");
  const int show_progress = !quiet && !(log && *log);
  if (show_progress)
    strata_log_set_handler(calibrate_progress, STRATA_LOG_INFO, NULL);
  char *json = NULL;
  int rc = strata_calibrate_model(list ? devs : NULL, n, model, rows, nrows, (int)max_tp, &json);
  if (!rc && bf16) {
    char *with = NULL;
    rc = strata_calibrate_bf16(json, &with);
    free(json);
    json = with;
  }
  if (show_progress)
    strata_log_set_handler(NULL, STRATA_LOG_ERROR, NULL);
  strata_model_free(model);
  free(rows);
  free(devs);
  if (rc) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    strata_shutdown();
    return rc == STRATA_ERR_RANGE ? 2 : 1;
  }
  if (cli_write_line("strata-bench", "calibrate", out, &json)) { /* a failure keeps the calibration there */
    free(json);
    strata_shutdown();
    return 1;
  }
  fputs(json, stdout);
  if (!quiet)
    fprintf(stderr, "strata-bench: calibration written to %s\n", out);
  free(json);
  strata_shutdown();
  return 0;
}

int main(int argc, char **argv) {
  struct options o = {.device = -1, .reps = 5, .user_coretype = getenv("OPENBLAS_CORETYPE")};
  parse_sizes("512,1024,2048", &o);
  if (argc < 2) { /* bad usage is one line, like every other refusal */
    fprintf(stderr, "strata-bench: which benchmark? (known: gemm; see --help)\n");
    return 2;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("strata-bench %s\n", strata_version());
    return 0;
  }
  if (strata_bench_is_comm(argv[1]))
    return strata_bench_comm_main(argc, argv);
  if (strcmp(argv[1], "mpi") == 0)
    return strata_bench_mpi_main(argc, argv);
  if (strcmp(argv[1], "calibrate") == 0)
    return calibrate_main(argc, argv);
  if (strcmp(argv[1], "gemm") != 0) {
    fprintf(stderr, "strata-bench: unknown benchmark '%s' (known: gemm, allreduce, allgather, reducescatter, "
                    "broadcast, mpi, calibrate)\n", argv[1]);
    return 2;
  }
  static const struct option longopts[] = {{"device", required_argument, NULL, 'd'},
                                           {"sizes", required_argument, NULL, 's'},
                                           {"reps", required_argument, NULL, 'r'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"compare", no_argument, NULL, 'c'},
                                           {"precision", required_argument, NULL, 'p'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c;
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":d:s:r:p:h", longopts, NULL)) != -1) {
    int64_t v = 0;
    switch (c) {
    case 'd':
      if (cli_parse_range("strata-bench", "--device", optarg, 0, 1000000, &v))
        return 2;
      o.device = (int)v;
      break;
    case 's':
      if (parse_sizes(optarg, &o)) {
        fprintf(stderr, "strata-bench: --sizes wants a list like 512,1024 (each 1..32768), not '%s'\n", optarg);
        return 2;
      }
      break;
    case 'r':
      if (cli_parse_range("strata-bench", "--reps", optarg, 1, 64, &v))
        return 2;
      o.reps = (int)v;
      break;
    case 'j':
      o.json = 1;
      break;
    case 'c':
      o.compare = 1;
      break;
    case 'p':
      if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "bf16") != 0) {
        fprintf(stderr, "strata-bench: --precision wants fp32 or bf16, not '%s'\n", optarg);
        return 2;
      }
      o.bf16 = strcmp(optarg, "bf16") == 0;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      cli_refuse("strata-bench", c == ':' ? ':' : '?', argc, argv);
      return 2;
    }
  }
  if (cli_refuse("strata-bench", 0, argc, argv))
    return 2;
  if (o.bf16 && o.compare) {
    fprintf(stderr, "strata-bench: --compare times fp32 libraries only; leave it out with --precision bf16\n");
    return 2;
  }
  int rc = bench_gemm(&o);
  strata_shutdown();
  return rc;
}
