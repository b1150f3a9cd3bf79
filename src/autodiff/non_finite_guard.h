// The non-finite guard: one finiteness check of the loss and every gradient per step, computed on
// the device inside the step, that the optimizer updates read to skip the step whole. It is loss
// scaling's skip (src/ops/loss_scale.cc) generalised: without loss scaling the same check
// (grad_nonfinite -> loss_scale_check) runs with an unscale factor of 1 and keeps the guard's
// counters in state tensors (attr count); with loss scaling the scaler's own check is the
// guard (it skips and counts overflowing steps already) and only the loss is added to it.
//
// Nothing reaches the host per step: no synchronisation, no graph update. The counters are state
// tensors, read on request (Trainer::SkippedSteps, Report) and kept by checkpoints.
//
// With data parallelism the gradients checked are the averaged ones, the same on every rank, but
// the loss is each rank's own: a rank whose loss alone is non-finite (every gradient finite)
// would skip alone. Not yet handled: the check would need the loss averaged too.
//
// TrainOptions::numerics.non_finite (its options: reprise/non_finite.h).
#ifndef REPRISE_SRC_AUTODIFF_NON_FINITE_GUARD_H_
#define REPRISE_SRC_AUTODIFF_NON_FINITE_GUARD_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "reprise/non_finite.h"
#include "reprise/optimizer.h"

namespace reprise::autodiff {

struct TrainingGraph;

using NonFinitePolicy = ::reprise::NonFinitePolicy;
using NonFiniteOptions = ::reprise::NonFiniteOptions;

// Graph names of the guard without loss scaling: the check f32[2] = [1, found] that the updates
// read; the skipped-step count (state i32[]); and the record (state i32[2]) = [steps checked,
// 1 + the index of the first step found non-finite, or 0].
inline constexpr char kNonFiniteCheck[] = "non_finite.check";
inline constexpr char kNonFiniteSkippedSteps[] = "non_finite.skipped_steps";
inline constexpr char kNonFiniteRecord[] = "non_finite.record";

// Whether `name` is one of the guard's counters: state of a trainer's run, not of the model, so
// weight files need not carry them (a step without the guard has none).
inline bool IsNonFiniteCounter(absl::string_view name) {
  return name == kNonFiniteSkippedSteps || name == kNonFiniteRecord;
}

// InvalidArgument for a policy that is not a known NonFinitePolicy, and for kStop with a loss
// scaling that scales (`scaling` resolved: kAuto already decided).
absl::Status ValidateNonFiniteOptions(const NonFiniteOptions& options,
                                      const LossScaleOptions& scaling);

// Whether the policy checks anything.
inline bool Guards(const NonFiniteOptions& options) {
  return options.policy != NonFinitePolicy::kIgnore;
}

// The graph builders' default: no guard, so that a bare training graph (tests of other passes)
// stays as it was. The Trainer passes TrainOptions::numerics.non_finite, which guards by default.
inline constexpr NonFiniteOptions kNoGuard{NonFinitePolicy::kIgnore};

// The check the updates read (attr loss_scaled, as loss scaling's), added to `t` (its backward
// built, no update yet); nullopt for kIgnore. With loss scaling (`scaling` resolved, its state
// kLossScale present) the scaler's check of the gradients, the loss among them; otherwise
// grad_nonfinite over the loss and the gradients (16-bit ones before their widening cast), then
// loss_scale_check with no scale: [1, found], which also moves the skipped-step count and the
// record on (attr count); sticky under kStop (found also once the record holds a non-finite step).
absl::StatusOr<std::optional<Value>> AddNonFiniteCheck(const NonFiniteOptions& options,
                                                       const LossScaleOptions& scaling,
                                                       TrainingGraph& t);

// The node of the check the updates read, loss scaling's or the guard's; NotFound if neither.
absl::StatusOr<int32_t> FindStepCheck(const Graph& g);

}  // namespace reprise::autodiff

#endif  // REPRISE_SRC_AUTODIFF_NON_FINITE_GUARD_H_
