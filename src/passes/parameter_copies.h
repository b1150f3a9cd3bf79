// Mixed precision's 16-bit parameter copies kept between steps, written by the update.
//
// Without it every step starts with cast_multi: all float32 weights read and their 16-bit copies
// written (GPT-2 124M: 0.75 GB, 0.2 ms at the head of the step, before the forward can start).
// But the update has each new weight in a register already; writing its rounding costs only the
// 16-bit store. So the fused graph changes:
//   cast_multi(p...) -> c...      becomes   refresh_copies(p..., c..., stale), c... state
//   adam_multi(...)               becomes   adam_multi(..., c..., stale), attr copies
// (or sgd_multi alike, TrainOptions::kernels.sgd_one_launch)
// The copies are state (placed once, kept between steps); every reader of one reads the state
// after refresh_copies (control edges), and the update writes them after every reader. The copies
// are current after every update; only the host can make them stale, by writing the weights
// (SetParameter, LoadWeights, RestoreCheckpoint), and each such write settles the plan's kernels
// first, which sets the flag (ops::RefreshCopiesOp), so the next step rounds the weights again.
// The bits are those of the casts: the same rounding of the same weights.
#ifndef REPRISE_SRC_PASSES_PARAMETER_COPIES_H_
#define REPRISE_SRC_PASSES_PARAMETER_COPIES_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/passes/fuse.h"

namespace reprise::passes {

// Rewrites `fused` as above where it has one cast_multi of parameters that its one adam_multi or
// sgd_multi (not both) all updates, no copy is in `kept` (values of fused.training) and every
// reader of a copy runs before the update; leaves it unchanged otherwise (no mixed precision,
// SGD in sgd_momentum_multi's launches, the whole-step kernel), and also where a copy's name
// ("<parameter>.<dtype>_copy") is taken.
absl::Status KeepParameterCopies(FusedTraining& fused, absl::Span<const Value> kept);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_PARAMETER_COPIES_H_
