/* SPDX-License-Identifier: MIT */
/* strata-plan.c — place a training job: search layouts for a model and a batch on a topology or a synthetic machine, rank them by simulated step time, explain the choice; or predict a given layout. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/strata.h>

#include "cli.h"

/* Exit statuses: 0 a plan (or a prediction), 1 nothing fits or a runtime failure, 2 bad usage or bad input. */
#define PROG "strata-plan"

static void usage(FILE *f) {
  fprintf(f,
          "Usage: strata-plan --model PRESET|FILE --batch B [WHERE] [options]\n"
          "       strata-plan --simulate LAYOUT.json --model PRESET|FILE --batch B [WHERE] [--trace FILE]\n"
          "                   [--samples N] [--seed S]\n"
          "\n"
          "Searches dp x pp x tp layouts (device assignment, split, micro-batches, schedule: gpipe, 1f1b,\n"
          "interleaved, zb-h1, zbv or dualpipev, and the memory modes: activation recomputation and the ZeRO\n"
          "stage) for training\n"
          "MODEL with a global batch of B samples, ranks them by the simulator's predicted step time and explains\n"
          "the choice; --out writes the best as a layout file that strata-train --layout reads. A cnn with\n"
          "gap that no such layout fits (one image's activations too large for a device) is planned as\n"
          "spatial slabs (strata-train --spatial), costed with their halo exchanges.\n"
          "\n"
          "Where (default: --topology live):\n"
          "  --topology FILE.xml|live   an hwloc XML dump, or this machine\n"
          "  --node COUNTxMODEL:FABRIC  a synthetic node, e.g. 8xA100-80GB:nvswitch, 4xMI250X:xgmi, 8xT4:pcie\n"
          "  --calibration FILE         this machine's runtime devices as strata-bench calibrate measured them\n"
          "                             (layout devices are then runtime indices, as strata-train counts them)\n"
          "  --nodes N                  N copies of the node joined by a network (default 1)\n"
          "  --network-gbps B           Gb/s of each network interface (default 100)\n"
          "  --nics K                   network interfaces per node (default 1)\n"
          "  --network-latency-us L     one-way network latency (default 5)\n"
          "  --devices LIST             use only these GPUs of the node (topology indices, e.g. 0,1,4,5)\n"
          "  --gpu-memory SIZE          memory of each GPU of the topology whose memory neither the dump nor the\n"
          "                             table of GPU models gives (e.g. 6G); without it such a GPU is refused\n"
          "\n"
          "Options:\n"
          "  --top K          show the K best layouts (default 5)\n"
          "  --tp T           only tensor-parallel degree T\n"
          "  --no-zero        never shard across replicas (the same as --zero 0)\n"
          "  --recompute M    auto (default: searched), none, selective or full: activation recomputation of the\n"
          "                   GPT blocks, as strata-train --recompute runs it (not with zb, zbv, dualpipev)\n"
          "  --zero Z         auto (default: searched where dp >= 2), 0, 1, 2 or 3: the ZeRO stage (1 shards the\n"
          "                   optimizer state over the replicas, 2 also the gradients, 3 also the parameters)\n"
          "  --sp S           auto (default: searched where every rank has the same tp > 1), on or off: sequence\n"
          "                   parallelism, as strata-train --sp runs it (not with zb, zbv, dualpipev)\n"
          "                   Each plan says its modes; a saving mode is chosen only where it is needed or faster\n"
          "  --precision P    fp32 (default) or bf16: plan mixed precision as strata-train --precision bf16 trains\n"
          "                   (GEMMs at the GPUs' bf16 peaks or a calibration's bf16 speeds, bf16 activations and\n"
          "                   pipeline messages, fp32 master weights, moments, tp joins and gradient all-reduce);\n"
          "                   the layouts written say it. With --simulate the layout's own precision is used; a\n"
          "                   --precision that differs from it is refused\n"
          "  --json           machine-readable output (schema strata-plan/1)\n"
          "  --trace FILE     the best layout's (or the simulated one's) predicted step as a Chrome/Perfetto trace\n"
          "  --out FILE       write the best layout (strata-layout/1)\n"
          "  --samples N      with --simulate: simulate N steps, each compute action's time drawn from its device's\n"
          "                   spread as calibration measured it, and report the median step (default 15; 1: one\n"
          "                   step at the median costs; devices without a measured spread keep time exactly)\n"
          "  --seed S         the draws' seed (default 1): the same seed gives the same steps\n"
          "  --list-gpus      the table of GPU models with their peaks and sources\n"
          "  -h, --help       this text\n"
          "      --version    show the version\n"
          "\n"
          "Exit status: 0 on success, 1 when nothing fits (the one-line message says how many devices would, or why\n"
          "no count ever can: a tp degree no island holds, a layer larger than one device; counting stops after\n"
          "5 s), 2 on bad usage or bad input.\n");
}

struct args {
  const char *model, *topology, *node, *devices, *trace, *out, *simulate, *calibration;
  int64_t batch, top, nodes, nics, tp, samples, seed;
  uint64_t gpu_memory;
  double net_gbps, net_lat;
  int json, no_zero, list_gpus;
  int recompute, zero, sp;          /* struct strata_plan_options' modes: STRATA_PLAN_AUTO or STRATA_PLAN_ONLY(v) */
  int precision, precision_given;   /* STRATA_FLOAT32 or STRATA_BFLOAT16 */
};

/* --devices "0,1,4" into a new array; -1 with a message when malformed or empty. */
static int parse_list(const char *text, int **out, int *n) {
  if (cli_parse_list(PROG, "--devices", text, 0, 65535, out, n))
    return -1;
  if (*n == 0) {
    fprintf(stderr, "%s: --devices wants a list of GPU indices, e.g. 0,1,2,3\n", PROG);
    free(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

static void list_gpus(void) {
  printf("%-22s %-7s %10s %10s %10s %9s %8s  %s\n", "model", "vendor", "fp32 TF", "tf32 TF", "bf16 TF", "GB/s", "memory",
         "source");
  for (int i = 0; i < strata_gpu_model_count(); i++) {
    struct strata_gpu_model m;
    strata_gpu_model_get(i, &m);
    printf("%-22s %-7s %10.1f %10.1f %10.1f %9.0f %7.0fG  %s\n", m.name, m.vendor, m.fp32_tflops, m.tf32_tflops,
           m.bf16_tflops, m.mem_gbps, (double)m.memory / 1e9, m.source);
  }
}

/* Layout devices are the node's own indices on one node (topology GPUs), machine indices past one. */
static int to_external(strata_machine_t c, int dev) {
  struct strata_machine_device d;
  strata_machine_device(c, dev, &d);
  return strata_machine_nodes(c) == 1 ? d.id : dev;
}

/* The layout with its devices renumbered by `map` (to_external, or back). */
static int renumber(strata_layout_t l, strata_machine_t c, int back, strata_layout_t *out) {
  char *js = NULL;
  int rc = strata_layout_to_json(l, &js);
  if (rc)
    return rc;
  json_error_t err;
  json_t *o = json_loads(js, 0, &err);
  free(js);
  if (!o)
    return STRATA_ERR_NOMEM; /* strata_layout_to_json's own output: only memory can fail it */
  json_t *devs = json_object_get(o, "devices");
  size_t i;
  json_t *v;
  const int n = strata_machine_device_count(c);
  json_array_foreach(devs, i, v) {
    int d = (int)json_integer_value(v), m = -1;
    if (!back) {
      m = to_external(c, d);
    } else {
      for (int k = 0; k < n && m < 0; k++)
        if (to_external(c, k) == d)
          m = k;
      if (m < 0) {
        json_decref(o);
        fprintf(stderr, "%s: the layout names device %d, which is not in %s\n", PROG, d, strata_machine_describe(c));
        return STRATA_ERR_RANGE;
      }
    }
    json_array_set_new(devs, i, json_integer(m));
  }
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!s)
    return STRATA_ERR_NOMEM;
  rc = strata_layout_from_json(s, "layout", out);
  free(s);
  return rc;
}

static int write_layout(strata_layout_t l, strata_machine_t c, const char *path) {
  strata_layout_t e;
  int rc = renumber(l, c, 0, &e);
  if (rc)
    return rc;
  char *js = NULL;
  rc = strata_layout_to_json(e, &js);
  strata_layout_free(e);
  if (rc)
    return rc;
  rc = cli_write_line(PROG, "--out", path, &js) ? STRATA_ERR_IO : STRATA_OK; /* a failure keeps the file there */
  free(js);
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int build_machine(const struct args *a, strata_machine_t *c) {
  struct strata_machine_options o = {.nodes = (int)a->nodes, .network_gbps = a->net_gbps, .nics = (int)a->nics,
                                     .network_latency_us = a->net_lat, .gpu_memory = a->gpu_memory};
  int *devs = NULL, n = 0, rc;
  if (a->devices && parse_list(a->devices, &devs, &n))
    return 2;
  o.devices = devs;
  o.ndevices = n;
  if (a->calibration) {
    free(devs);
    if (a->devices) {
      fprintf(stderr, "%s: --devices chooses GPUs of a topology; calibrate only the devices you want instead\n", PROG);
      return 2;
    }
    rc = strata_machine_load_calibration(a->calibration, &o, c);
  } else if (a->node) {
    if (devs) {
      fprintf(stderr, "%s: --devices chooses GPUs of a topology, not of a synthetic --node\n", PROG);
      free(devs);
      return 2;
    }
    rc = strata_machine_synthetic(a->node, &o, c);
  } else {
    strata_topology_t t;
    const char *xml = a->topology && strcmp(a->topology, "live") != 0 ? a->topology : NULL;
    rc = strata_topology_load(xml, &t); /* NULL: STRATA_TOPOLOGY_XML when set, else this machine */
    if (rc == STRATA_OK) {
      rc = strata_machine_from_topology(t, &o, c);
      strata_topology_free(t);
    }
  }
  if (!a->calibration)
    free(devs);
  if (rc) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return rc == STRATA_ERR_NOMEM ? 1 : 2;
  }
  return 0;
}

static void print_result_text(const struct strata_sim_result *r) {
  printf("predicted step %.4g s, %.4g samples/s, %.4g tokens/s, %.3g TFLOP/s per device\n", r->step_s,
         r->samples_per_s, r->tokens_per_s, r->flops_per_device / 1e12);
  printf("bubble %.1f%%, communication %.1f%%, peak memory %.2f GB%s\n", 100 * r->bubble, 100 * r->comm_share,
         (double)r->peak_bytes / 1e9, r->fits ? "" : " (does NOT fit)");
  for (int d = 0; d < r->devices; d++)
    printf("  device %d: busy %.1f%%, peak %.2f GB\n", d, 100 * r->busy[d], (double)r->memory[d] / 1e9);
}

static int simulate(const struct args *a, strata_machine_t c, strata_model_t m) {
  strata_layout_t file, l;
  if (strata_layout_load(a->simulate, &file)) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return 2;
  }
  if (a->precision_given && strata_layout_precision(file) != a->precision) {
    fprintf(stderr, "%s: --precision %s and the layout's %s differ (give the layout's, or leave --precision out)\n",
            PROG, a->precision == STRATA_BFLOAT16 ? "bf16" : "fp32",
            strata_layout_precision(file) == STRATA_BFLOAT16 ? "bf16" : "fp32");
    strata_layout_free(file);
    return 2;
  }
  int rc = renumber(file, c, 1, &l);
  strata_layout_free(file);
  if (rc) {
    if (rc != STRATA_ERR_RANGE)
      fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return 2;
  }
  struct strata_sim_options so = {.batch = a->batch, .trace = a->trace, .samples = (int)a->samples,
                                  .seed = (uint64_t)a->seed};
  struct strata_sim_result r;
  rc = strata_simulate(c, m, l, &so, &r);
  if (rc) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    strata_layout_free(l);
    return rc == STRATA_ERR_NOMEM || rc == STRATA_ERR_IO ? 1 : 2;
  }
  if (a->json) {
    json_t *o = json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:b}", "schema", "strata-plan-simulation/1",
                          "step_s", r.step_s, "bubble", r.bubble, "comm_share", r.comm_share, "samples_per_s",
                          r.samples_per_s, "tokens_per_s", r.tokens_per_s, "flops_per_device", r.flops_per_device,
                          "peak_bytes", (json_int_t)r.peak_bytes, "fits", r.fits);
    json_object_set_new(o, "samples", json_integer(r.samples));
    json_object_set_new(o, "step_lo_s", json_real(r.step_lo_s));
    json_object_set_new(o, "step_hi_s", json_real(r.step_hi_s));
    json_t *busy = json_array(), *mem = json_array();
    for (int d = 0; d < r.devices; d++) {
      json_array_append_new(busy, json_real(r.busy[d]));
      json_array_append_new(mem, json_integer((json_int_t)r.memory[d]));
    }
    json_object_set_new(o, "busy", busy);
    json_object_set_new(o, "memory", mem);
    char *s = json_dumps(o, JSON_INDENT(2));
    printf("%s\n", s);
    free(s);
    json_decref(o);
  } else {
    char *d = NULL;
    strata_layout_describe(l, &d);
    printf("%s on %s\n", d ? d : "layout", strata_machine_describe(c));
    free(d);
    print_result_text(&r);
    if (r.samples > 1)
      printf("the median of %d simulated steps (fastest %.4g s, slowest %.4g s), each action's time drawn from its "
             "device's measured spread\n", r.samples, r.step_lo_s, r.step_hi_s);
  }
  strata_sim_result_destroy(&r);
  strata_layout_free(l);
  return 0;
}

static int plan(const struct args *a, strata_machine_t c, strata_model_t m) {
  struct strata_plan_options po = {.batch = a->batch, .top = (int)a->top, .no_zero = a->no_zero, .fixed_tp = (int)a->tp,
                                   .precision = a->precision, .recompute = a->recompute, .zero = a->zero, .sp = a->sp};
  strata_plan_t p;
  double t0 = now_s();
  int rc = strata_plan_search(c, m, &po, &p);
  double took = now_s() - t0;
  if (rc) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return rc == STRATA_ERR_DEVICE_MEMORY || rc == STRATA_ERR_NOMEM ? 1 : 2;
  }
  int sim = 0, pruned = 0, considered = 0, dominated = 0;
  strata_plan_counts(p, &considered, &pruned, &dominated, &sim);
  struct strata_plan_candidate best;
  strata_plan_candidate(p, 0, &best);
  if (a->out && (rc = write_layout(best.layout, c, a->out)) != 0) {
    strata_plan_free(p);
    return 1;
  }
  if (a->trace) {
    struct strata_sim_options so = {.batch = a->batch, .trace = a->trace};
    struct strata_sim_result r;
    if (strata_simulate(c, m, best.layout, &so, &r)) {
      fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
      strata_plan_free(p);
      return 1;
    }
    strata_sim_result_destroy(&r);
  }
  char *explain = NULL;
  strata_plan_explain(p, &explain);
  if (a->json) {
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:i, s:i}", "schema", "strata-plan/1", "model",
                          strata_model_config(m)->name, "cluster", strata_machine_describe(c), "batch",
                          (json_int_t)a->batch, "plan_s", took, "considered", considered, "simulated", sim, "pruned",
                          pruned, "dominated", dominated);
    json_t *arr = json_array();
    for (int i = 0; i < strata_plan_count(p); i++) {
      struct strata_plan_candidate k;
      strata_plan_candidate(p, i, &k);
      strata_layout_t e;
      char *js = NULL;
      json_t *lj = NULL;
      if (renumber(k.layout, c, 0, &e) == STRATA_OK) {
        if (strata_layout_to_json(e, &js) == STRATA_OK)
          lj = json_loads(js, 0, NULL);
        free(js);
        strata_layout_free(e);
      }
      json_array_append_new(arr, json_pack("{s:i, s:o, s:s, s:i, s:b, s:f, s:f, s:f, s:f, s:I, s:s}", "rank", i + 1,
                                           "layout", lj ? lj : json_null(), "recompute",
                                           strata_recompute_name(strata_layout_recompute(k.layout)), "zero",
                                           strata_layout_zero(k.layout), "sp", strata_layout_sp(k.layout),
                                           "step_s", k.step_s,
                                           "samples_per_s", k.samples_per_s, "flops_per_device", k.flops_per_device,
                                           "bubble", k.bubble, "peak_bytes", (json_int_t)k.peak_bytes, "reason",
                                           k.reason));
    }
    json_object_set_new(o, "precision", json_string(a->precision == STRATA_BFLOAT16 ? "bf16" : "fp32"));
    json_object_set_new(o, "candidates", arr);
    json_object_set_new(o, "explanation", json_string(explain ? explain : ""));
    char *s = json_dumps(o, JSON_INDENT(2));
    printf("%s\n", s);
    free(s);
    json_decref(o);
  } else {
    printf("%s, batch %lld%s, on %s\n", strata_model_config(m)->name, (long long)a->batch,
           a->precision == STRATA_BFLOAT16 ? ", bf16" : "", strata_machine_describe(c));
    for (int i = 0; i < strata_machine_warning_count(c); i++)
      printf("note: %s\n", strata_machine_warning(c, i));
    printf("%-3s %10s %12s %11s %7s %8s  %s\n", "#", "step s", "samples/s", "TFLOP/s/dev", "bubble", "peak GB",
           "layout and why");
    for (int i = 0; i < strata_plan_count(p); i++) {
      struct strata_plan_candidate k;
      strata_plan_candidate(p, i, &k);
      printf("%-3d %10.4g %12.4g %11.3g %6.1f%% %8.2f  %s\n", i + 1, k.step_s, k.samples_per_s,
             k.flops_per_device / 1e12, 100 * k.bubble, (double)k.peak_bytes / 1e9, k.reason);
    }
    {
      struct strata_plan_candidate k;
      strata_plan_candidate(p, 0, &k);
      printf("modes: recompute %s, zero %d, sp %s\n", strata_recompute_name(strata_layout_recompute(k.layout)),
             strata_layout_zero(k.layout), strata_layout_sp(k.layout) ? "on" : "off");
    }
    printf("\n%s", explain ? explain : "");
    strata_layout_t e;
    if (renumber(best.layout, c, 0, &e) == STRATA_OK) {
      char *js = NULL;
      strata_layout_to_json(e, &js);
      printf("layout: %s\n", js ? js : "");
      free(js);
      strata_layout_free(e);
    }
    /* strata-train runs one tp degree for every pipeline rank */
    int mixed = 0;
    for (int r = 1; r < strata_layout_pp(best.layout); r++)
      mixed |= strata_layout_tp(best.layout, r) != strata_layout_tp(best.layout, 0);
    if (mixed)
      printf("note: strata-train does not run a tp degree per pipeline rank yet; --tp T plans one degree for all\n");
    printf("planned in %.3f s: %d layouts simulated, %d pruned by memory (of %d considered; %d more never "
           "simulated, dominated)\n", took, sim, pruned, considered, dominated);
  }
  free(explain);
  strata_plan_free(p);
  return 0;
}

int main(int argc, char **argv) {
  struct args a = {.top = 5, .nodes = 1, .samples = 15, .seed = 1};
  static const struct option longopts[] = {
      {"model", required_argument, NULL, 'm'},      {"batch", required_argument, NULL, 'b'},
      {"topology", required_argument, NULL, 'T'},   {"node", required_argument, NULL, 'N'},
      {"nodes", required_argument, NULL, 'n'},      {"network-gbps", required_argument, NULL, 'g'},
      {"nics", required_argument, NULL, 'k'},       {"network-latency-us", required_argument, NULL, 'l'},
      {"devices", required_argument, NULL, 'd'},    {"top", required_argument, NULL, 't'},
      {"tp", required_argument, NULL, 'p'},         {"no-zero", no_argument, NULL, 'z'},
      {"json", no_argument, NULL, 'j'},             {"trace", required_argument, NULL, 'r'},
      {"out", required_argument, NULL, 'o'},        {"simulate", required_argument, NULL, 's'},
      {"list-gpus", no_argument, NULL, 'L'},        {"help", no_argument, NULL, 'h'},
      {"calibration", required_argument, NULL, 'C'},  {"samples", required_argument, NULL, 'S'},
      {"seed", required_argument, NULL, 'E'},        {"version", no_argument, NULL, 'V'},
      {"gpu-memory", required_argument, NULL, 'G'}, {"precision", required_argument, NULL, 'P'},
      {"recompute", required_argument, NULL, 'R'},  {"zero", required_argument, NULL, 'Z'},
      {"sp", required_argument, NULL, 'Q'},
      {NULL, 0, NULL, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case 'V': printf("strata-plan %s\n", strata_version()); return 0;
    case 'm': a.model = optarg; break;
    case 'b':
      if (cli_parse_int(PROG, "--batch", optarg, 1, &a.batch))
        return 2;
      break;
    case 'T': a.topology = optarg; break;
    case 'N': a.node = optarg; break;
    case 'n':
      if (cli_parse_range(PROG, "--nodes", optarg, 1, 1 << 20, &a.nodes))
        return 2;
      break;
    case 'g':
      if (cli_parse_real(PROG, "--network-gbps", optarg, 0, 1e6, STRATA__PARSE_ABOVE_MIN, "a positive number of Gb/s",
                         &a.net_gbps))
        return 2;
      break;
    case 'k':
      if (cli_parse_range(PROG, "--nics", optarg, 1, 1024, &a.nics))
        return 2;
      break;
    case 'l':
      if (cli_parse_real(PROG, "--network-latency-us", optarg, 0, 1e6, STRATA__PARSE_ABOVE_MIN,
                         "a positive number of microseconds", &a.net_lat))
        return 2;
      break;
    case 'd': a.devices = optarg; break;
    case 'G': {
      int prc = strata__parse_size(optarg, &a.gpu_memory);
      if (prc || a.gpu_memory < (1u << 20) || a.gpu_memory > ((uint64_t)1 << 50)) {
        fprintf(stderr, "%s: --gpu-memory: '%s' is not a size between 1M and 1P (%s)\n", PROG, optarg,
                prc ? strata__parse_why() : a.gpu_memory < (1u << 20) ? "too small" : "too large");
        return 2;
      }
      break;
    }
    case 't':
      if (cli_parse_range(PROG, "--top", optarg, 1, 1000, &a.top))
        return 2;
      break;
    case 'p':
      if (cli_parse_range(PROG, "--tp", optarg, 1, 4096, &a.tp))
        return 2;
      break;
    case 'z': a.no_zero = 1; break;
    case 'R': {
      int mode;
      if (strcmp(optarg, "auto") == 0) {
        a.recompute = STRATA_PLAN_AUTO;
      } else if (strata_recompute_parse(optarg, &mode) == STRATA_OK) {
        a.recompute = STRATA_PLAN_ONLY(mode);
      } else {
        fprintf(stderr, "%s: --recompute '%s': expected auto, none, selective or full\n", PROG, optarg);
        return 2;
      }
      break;
    }
    case 'Z':
      if (strcmp(optarg, "auto") == 0) {
        a.zero = STRATA_PLAN_AUTO;
      } else if (strlen(optarg) == 1 && optarg[0] >= '0' && optarg[0] <= '3') {
        a.zero = STRATA_PLAN_ONLY(optarg[0] - '0');
      } else {
        fprintf(stderr, "%s: --zero '%s': expected auto, 0, 1, 2 or 3\n", PROG, optarg);
        return 2;
      }
      break;
    case 'Q':
      if (strcmp(optarg, "auto") == 0 || strcmp(optarg, "off") == 0 || strcmp(optarg, "on") == 0) {
        a.sp = optarg[0] == 'a' ? STRATA_PLAN_AUTO : STRATA_PLAN_ONLY(strcmp(optarg, "on") == 0);
      } else {
        fprintf(stderr, "%s: --sp '%s': expected auto, on or off\n", PROG, optarg);
        return 2;
      }
      break;
    case 'P':
      if (strcmp(optarg, "fp32") == 0) {
        a.precision = STRATA_FLOAT32;
      } else if (strcmp(optarg, "bf16") == 0) {
        a.precision = STRATA_BFLOAT16;
      } else if (strcmp(optarg, "fp16") == 0) {
        fprintf(stderr, "%s: --precision fp16: not supported (float16 needs a dynamic loss scaler strata does not "
                "have); fp32 or bf16\n", PROG);
        return 2;
      } else {
        fprintf(stderr, "%s: --precision '%s': expected fp32 or bf16\n", PROG, optarg);
        return 2;
      }
      a.precision_given = 1;
      break;
    case 'j': a.json = 1; break;
    case 'r': a.trace = optarg; break;
    case 'o': a.out = optarg; break;
    case 's': a.simulate = optarg; break;
    case 'L': a.list_gpus = 1; break;
    case 'C': a.calibration = optarg; break;
    case 'S':
      if (cli_parse_range(PROG, "--samples", optarg, 1, 10000, &a.samples))
        return 2;
      break;
    case 'E':
      if (cli_parse_range(PROG, "--seed", optarg, 0, INT64_MAX, &a.seed))
        return 2;
      break;
    case 'h': usage(stdout); return 0;
    default:
      cli_refuse(PROG, c, argc, argv);
      return 2;
    }
  }
  if (cli_refuse(PROG, 0, argc, argv))
    return 2;
  if (a.list_gpus) {
    list_gpus();
    return 0;
  }
  if (!a.model || !a.batch) {
    fprintf(stderr, "%s: --model and --batch are required (see --help)\n", PROG);
    return 2;
  }
  if (a.no_zero && a.zero > STRATA_PLAN_ONLY(0)) {
    fprintf(stderr, "%s: --no-zero and --zero %d ask for opposite things; give one\n", PROG, a.zero - 1);
    return 2;
  }
  if (a.gpu_memory && (a.node || a.calibration)) {
    fprintf(stderr, "%s: --gpu-memory gives the memory of a topology's GPUs; --node and --calibration know theirs\n",
            PROG);
    return 2;
  }
  if (!!a.node + !!a.topology + !!a.calibration > 1) {
    fprintf(stderr, "%s: --node, --topology and --calibration each say what to plan on; give one\n", PROG);
    return 2;
  }
  /* before any work: no output replaces an input or the other output, or anything but a regular file */
  const char *xml = a.topology && strcmp(a.topology, "live") != 0 ? a.topology : NULL;
  const struct strata_file_use files[] = {
      {.path = a.model, .what = "--model"},          {.path = xml, .what = "--topology"},
      {.path = a.calibration, .what = "--calibration"}, {.path = a.simulate, .what = "--simulate"},
      {.path = a.out, .what = "--out", .output = 1}, {.path = a.trace, .what = "--trace", .output = 1}};
  if (strata_file_preflight(files, (int)(sizeof files / sizeof files[0]))) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return 2;
  }
  strata_model_t m;
  int lrc = strata_model_load(a.model, &m);
  if (lrc) {
    fprintf(stderr, "%s: %s\n", PROG, strata_last_error());
    return cli_model_status(lrc); /* 2 for what the name or file says, 1 for a file that cannot be read */
  }
  strata_machine_t cl;
  int rc = build_machine(&a, &cl);
  if (rc) {
    strata_model_free(m);
    return rc;
  }
  rc = a.simulate ? simulate(&a, cl, m) : plan(&a, cl, m);
  strata_machine_free(cl);
  strata_model_free(m);
  return rc;
}
