/* SPDX-License-Identifier: MIT */
/* test-schedule.c — placeholder. */
#include "common.h"
Test(schedule, placeholder) {}
