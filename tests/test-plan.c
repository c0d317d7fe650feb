/* SPDX-License-Identifier: MIT */
/* test-plan.c — the cost model, the simulator against hand-computed figures and the schedules' own bubble, and the
** planner against exhaustive search and the topology rules of real machines. */
#include <strata/plan.h>

#include "common.h"

TestSuite(plan, .timeout = 120);

/* ---- the simulator ---- */

/* With unit costs the simulated bubble is the schedule's own, for every schedule, depth, micro-batch count and replica count. */
Test(plan, unit_cost_bubble_is_the_schedules) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_INTERLEAVED, STRATA_SCHEDULE_ZB_H1};
  int checked = 0;
  for (int k = 0; k < 4; k++)
    for (int p = 1; p <= 4; p++)
      for (int m = 1; m <= 8; m++)
        for (int r = 1; r <= 2; r++) {
          if (kinds[k] == STRATA_SCHEDULE_INTERLEAVED && (m % p || p < 2))
            continue;
          strata_schedule_t s;
          OK(strata_schedule_generate_replicated(kinds[k], p, m, 2, r, 0, &s));
          double want;
          OK(strata_schedule_bubble(s, &want));
          struct strata_sim_result res;
          OK(strata_simulate_schedule(s, NULL, &res));
          cr_assert_float_eq(res.bubble, want, 1e-12, "%s p %d m %d replicas %d: simulated %g, schedule %g",
                             strata_schedule_kind_name(kinds[k]), p, m, r, res.bubble, want);
          cr_assert_eq(res.devices, p * r);
          strata_sim_result_destroy(&res);
          strata_schedule_free(s);
          checked++;
        }
  cr_assert_gt(checked, 100);
}

/* 1F1B with unit costs: span (m + p - 1) x 3, the closed form (p - 1) / (m + p - 1). */
Test(plan, unit_cost_1f1b_span_is_the_closed_form) {
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 12; m++) {
      strata_schedule_t s;
      OK(strata_schedule_generate(STRATA_SCHEDULE_1F1B, p, m, 1, &s));
      struct strata_sim_result res;
      OK(strata_simulate_schedule(s, NULL, &res));
      cr_assert_float_eq(res.step_s, 3.0 * (m + p - 1), 1e-9, "p %d m %d: span %g", p, m, res.step_s);
      cr_assert_float_eq(res.bubble, (double)(p - 1) / (m + p - 1), 1e-12);
      strata_sim_result_destroy(&res);
      strata_schedule_free(s);
    }
}
