/* SPDX-License-Identifier: MIT */
/* test-numbers.c — class 5 of the hardening issue: the one number parser (lib/core/parse.c, compiled in) and every
** environment variable the library reads through it: decimal only, range-checked, finite, overflow refused. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "core/parse.h"

TestSuite(numbers, .timeout = 60);

static int64_t int_of(const char *text, int64_t min, int64_t max, int want) {
  int64_t v = -12345;
  int rc = strata__parse_int(text, min, max, &v);
  cr_assert_eq(rc, want, "'%s' in [%lld, %lld]: got %s (%s), want %s", text, (long long)min, (long long)max,
               strata_err_name(rc), strata__parse_why(), strata_err_name(want));
  if (rc)
    cr_assert_eq(v, -12345, "a refused parse must leave *out alone");
  return v;
}

Test(numbers, integers_decimal_only_range_checked_overflow_refused) {
  cr_assert_eq(int_of("42", 0, 100, STRATA_OK), 42);
  cr_assert_eq(int_of("007", 0, 100, STRATA_OK), 7);
  cr_assert_eq(int_of("-9223372036854775808", INT64_MIN, 0, STRATA_OK), INT64_MIN);
  cr_assert_eq(int_of("9223372036854775807", 0, INT64_MAX, STRATA_OK), INT64_MAX);
  int_of("9223372036854775808", 0, INT64_MAX, STRATA_ERR_RANGE); /* signed overflow, not wrapped */
  int_of("-9223372036854775809", INT64_MIN, 0, STRATA_ERR_RANGE);
  int_of("99999999999999999999999", 0, INT64_MAX, STRATA_ERR_RANGE);
  int_of("9223372036854775807", 2, 256, STRATA_ERR_RANGE); /* --virtual-stages */
  int_of("4294967296", 0, 1000000, STRATA_ERR_RANGE);      /* strata-bench --device: not device 0 */
  int_of("0x10", 0, 100, STRATA_ERR_PARSE);
  cr_assert(strstr(strata__parse_why(), "hexadecimal"), "%s", strata__parse_why());
  int_of("12x", 0, 100, STRATA_ERR_PARSE);
  cr_assert(strstr(strata__parse_why(), "'x' after the number"), "%s", strata__parse_why());
  int_of("", 0, 100, STRATA_ERR_PARSE);
  int_of(" 5", 0, 100, STRATA_ERR_PARSE);
  int_of("5 ", 0, 100, STRATA_ERR_PARSE);
  int_of("+5", 0, 100, STRATA_ERR_PARSE);
  int_of("-3", 1, 100, STRATA_ERR_RANGE);
  int_of("1e3", 0, 10000, STRATA_ERR_PARSE);
  int_of("101", 0, 100, STRATA_ERR_RANGE);
  int_of(NULL, 0, 100, STRATA_ERR_PARSE);
  uint64_t u = 0;
  cr_assert_eq(strata__parse_uint("18446744073709551615", UINT64_MAX, &u), STRATA_OK);
  cr_assert_eq(u, UINT64_MAX);
  cr_assert_eq(strata__parse_uint("18446744073709551616", UINT64_MAX, &u), STRATA_ERR_RANGE);
  cr_assert_eq(strata__parse_uint("-1", UINT64_MAX, &u), STRATA_ERR_RANGE);
}

static double real_of(const char *text, double min, double max, unsigned flags, int want) {
  double v = -12345;
  int rc = strata__parse_real(text, min, max, flags, &v);
  cr_assert_eq(rc, want, "'%s': got %s (%s), want %s", text, strata_err_name(rc), strata__parse_why(),
               strata_err_name(want));
  return v;
}

Test(numbers, reals_finite_decimal_and_never_silently_zero) {
  cr_assert_eq(real_of("1e-3", 0, FLT_MAX, STRATA__PARSE_FP32, STRATA_OK), 1e-3);
  cr_assert_eq(real_of(".5", 0, 1, 0, STRATA_OK), 0.5);
  cr_assert_eq(real_of("5.", 0, 10, 0, STRATA_OK), 5.0);
  cr_assert_eq(real_of("-2.5E+2", -1000, 0, 0, STRATA_OK), -250.0);
  cr_assert_eq(real_of("0", 0, 1, 0, STRATA_OK), 0.0);
  /* --lr 1e-50: a float would hold 0; refused, not trained with a learning rate of 0 */
  real_of("1e-50", 0, FLT_MAX, STRATA__PARSE_FP32 | STRATA__PARSE_ABOVE_MIN, STRATA_ERR_RANGE);
  cr_assert(strstr(strata__parse_why(), "fp32"), "%s", strata__parse_why());
  real_of("1e-400", 0, 1, 0, STRATA_ERR_RANGE); /* underflows even a double */
  real_of("1e400", 0, INFINITY, 0, STRATA_ERR_RANGE);
  real_of("1e39", 0, INFINITY, STRATA__PARSE_FP32, STRATA_ERR_RANGE);
  real_of("nan", 0, 1, 0, STRATA_ERR_PARSE);
  real_of("inf", 0, INFINITY, 0, STRATA_ERR_PARSE);
  real_of("-inf", -INFINITY, 0, 0, STRATA_ERR_PARSE);
  real_of("0x1p3", 0, 100, 0, STRATA_ERR_PARSE);
  real_of("1e", 0, 100, 0, STRATA_ERR_PARSE);
  real_of(".", 0, 100, 0, STRATA_ERR_PARSE);
  real_of("1.5x", 0, 100, 0, STRATA_ERR_PARSE);
  real_of(" 1", 0, 100, 0, STRATA_ERR_PARSE);
  real_of("0", 0, 100, STRATA__PARSE_ABOVE_MIN, STRATA_ERR_RANGE);
  real_of("-1", 0, 100, 0, STRATA_ERR_RANGE);
}

Test(numbers, sizes_binary_suffixes_overflow_detected) {
  uint64_t v = 0;
  cr_assert_eq(strata__parse_size("256M", &v), STRATA_OK);
  cr_assert_eq(v, 256ull << 20);
  cr_assert_eq(strata__parse_size("1.5GiB", &v), STRATA_OK);
  cr_assert_eq(v, 3ull << 29);
  cr_assert_eq(strata__parse_size("18446744073709551615", &v), STRATA_OK);
  cr_assert_eq(v, UINT64_MAX);
  cr_assert_eq(strata__parse_size("16777215T", &v), STRATA_OK);
  cr_assert_eq(strata__parse_size("16777216T", &v), STRATA_ERR_RANGE, "2^64 bytes overflows");
  cr_assert_eq(strata__parse_size("18446744073709551616", &v), STRATA_ERR_RANGE);
  cr_assert_eq(strata__parse_size("16777215.99999999999999T", &v), STRATA_ERR_RANGE);
  cr_assert_eq(strata__parse_size("0x100000", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata__parse_size("1e9", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata__parse_size("1.5", &v), STRATA_ERR_PARSE, "no fraction of a byte");
  cr_assert_eq(strata__parse_size("-1M", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata__parse_size("12 parsecs", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata__parse_size("inf", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata_parse_size("16777216T", &v), STRATA_ERR_RANGE, "the public parser is the same one");
  cr_assert(strstr(strata_last_error(), "overflows"), "%s", strata_last_error());
}

/* strata_init with one variable set to `value`: must fail, the message naming the variable. */
static void env_refused(const char *name, const char *value) {
  strata_shutdown();
  setenv("STRATA_BACKENDS", "host", 1);
  setenv(name, value, 1);
  int rc = strata_init();
  cr_assert_neq(rc, STRATA_OK, "%s='%s' was accepted", name, value);
  cr_assert(strstr(strata_last_error(), name), "%s='%s': %s", name, value, strata_last_error());
  unsetenv(name);
  strata_shutdown();
}

Test(numbers, environment_values_that_overflow_or_are_not_decimal_are_refused) {
  env_refused("STRATA_DEVICE_MEMORY_LIMIT", "16777216T");
  env_refused("STRATA_DEVICE_MEMORY_LIMIT", "99999999999999999999");
  env_refused("STRATA_DEVICE_MEMORY_LIMIT", "0x100000");
  env_refused("STRATA_DEVICE_MEMORY_LIMIT", "1e9");
  env_refused("STRATA_HOST_FAULT", "device=0,op=99999999999999999999");
  env_refused("STRATA_HOST_FAULT", "device=4294967296,op=1");
  env_refused("STRATA_HOST_FAULT", "device=0x0,op=1");
  env_refused("STRATA_HOST_FAULT", "device=0,op=1 ");
  env_refused("STRATA_HOST_DEVICES", "0x2");
  env_refused("STRATA_HOST_DEVICES", "18446744073709551618");
  env_refused("STRATA_HOST_THREADS", "2x");
  env_refused("STRATA_HOST_SLOW", "1");
  env_refused("STRATA_HOST_SLOW", "1:1");
  env_refused("STRATA_HOST_SLOW", "64:2");
  env_refused("STRATA_HOST_SLOW", "1:2,");
  env_refused("STRATA_HOST_SLOW", "1:nan");
  env_refused("STRATA_HOST_SLOW", "1:1000");
  /* and good values still work */
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_DEVICES", "2", 1);
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "1.5M", 1);
  setenv("STRATA_HOST_FAULT", "device=1,op=1000000", 1);
  setenv("STRATA_HOST_SLOW", "1:1.5", 1);
  OK(strata_init());
  int n = 0;
  OK(strata_device_count(&n));
  cr_assert_eq(n, 2);
  struct strata_device_props p;
  OK(strata_device_props(0, &p));
  cr_assert_eq(p.memory_limit, 3ull << 19);
  cr_assert_null(strstr(p.name, "slowed"), "%s", p.name);
  OK(strata_device_props(1, &p));
  cr_assert_not_null(strstr(p.name, ", slowed 1.5x"), "a slowed device says so: %s", p.name);
  /* it computes what the others do, only later */
  float x[4] = {1, -2, 3, -4}, y[4] = {0};
  strata_queue_t q;
  strata_buffer_t b;
  OK(strata_queue_new(1, &q));
  OK(strata_buffer_new(1, sizeof x, &b));
  OK(strata_buffer_write(q, b, 0, x, sizeof x));
  OK(strata_scale(q, strata_mem(b, 0), 0.5f, 4));
  OK(strata_buffer_read(q, b, 0, y, sizeof y));
  OK(strata_queue_finish(q));
  for (int i = 0; i < 4; i++)
    cr_assert_eq(y[i], 0.5f * x[i]);
  strata_buffer_free(b);
  strata_queue_free(q);
  unsetenv("STRATA_HOST_SLOW");
  strata_shutdown();
}

/* The options are resolved before any XML is read: a fixture that does not exist shows they come first. */
#define TOPO_FIXTURE STRATA_TEST_FIXTURES "/two-socket-4gpu-nvlink.xml"

/* STRATA_TOPO_*_GBPS=nan|inf: refused with a message, not replaced in silence or taken (and then dropped from JSON). */
Test(numbers, topology_bandwidths_from_the_environment_are_finite) {
  static const char *const names[] = {"STRATA_TOPO_SOCKET_GBPS", "STRATA_TOPO_NUMA_GBPS", "STRATA_TOPO_NET_GBPS",
                                      "STRATA_TOPO_NET_LATENCY_US"};
  static const char *const bad[] = {"nan", "inf", "-inf", "1e400", "0x10", "0", "-5", "12 "};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    for (size_t j = 0; j < sizeof bad / sizeof *bad; j++) {
      setenv(names[i], bad[j], 1);
      strata_topology_t t = NULL;
      int rc = strata_topology_load(TOPO_FIXTURE, &t);
      cr_assert_neq(rc, STRATA_OK, "%s=%s was accepted", names[i], bad[j]);
      cr_assert_null(t);
      cr_assert(strstr(strata_last_error(), names[i]), "%s", strata_last_error());
      unsetenv(names[i]);
    }
  /* a good value is taken (this machine's live topology needs no XML support in hwloc) */
  unsetenv("STRATA_TOPOLOGY_XML");
  setenv("STRATA_TOPO_NET_GBPS", "12.5", 1);
  strata_topology_t t = NULL;
  OK(strata_topology_load(NULL, &t));
  strata_topology_free(t);
  unsetenv("STRATA_TOPO_NET_GBPS");
  /* and the same for figures given through the API */
  OK(strata_topology_load(NULL, &t));
  struct strata_topology_options o = {.net_gbps = NAN};
  cr_assert_neq(strata_topology_set_options(t, &o), STRATA_OK, "a NaN figure was accepted");
  o.net_gbps = INFINITY;
  cr_assert_neq(strata_topology_set_options(t, &o), STRATA_OK, "an infinite figure was accepted");
  strata_topology_free(t);
}
