/* SPDX-License-Identifier: MIT */
/* strata/strata.h — the whole public API of strata in one include. */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#include <strata/common.h>
#include <strata/version.h>
#include <strata/device.h>
#include <strata/ops.h>
#include <strata/topology.h>
#include <strata/model.h>
#include <strata/data.h>
#include <strata/checkpoint.h>
#include <strata/hf.h>
#include <strata/train.h>
#include <strata/schedule.h>
#include <strata/comm.h>
#include <strata/cluster.h>
#include <strata/layout.h>
#include <strata/plan.h>

#endif /* STRATA_STRATA_H */
