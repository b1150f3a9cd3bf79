// The learning-rate schedule that lr_schedule's attributes describe, for the ops that apply it:
// lr_schedule itself, and adam_multi, which carries the same attributes when the fuse pass folds
// the schedule into the update (src/ops/ops.h).
#ifndef REPRISE_SRC_OPS_LR_SCHEDULE_H_
#define REPRISE_SRC_OPS_LR_SCHEDULE_H_

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/codegen/optimizer_kernels.h"

namespace reprise::ops {

// The schedule of attrs warmup_steps, decay ("constant", "cosine", "step"), total_steps and
// min_factor (cosine), step_size and gamma (step). InvalidArgument naming the attribute that is
// missing or out of range.
absl::StatusOr<codegen::ScheduleParams> LrScheduleParams(const Attrs& attrs);

// The names of those attributes.
inline constexpr const char* kLrScheduleAttrs[] = {"warmup_steps", "decay",     "total_steps",
                                                   "min_factor",   "step_size", "gamma"};

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LR_SCHEDULE_H_
