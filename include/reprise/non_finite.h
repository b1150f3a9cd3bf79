// Options of the non-finite guard (src/autodiff/non_finite_guard.h), which
// TrainOptions::numerics.non_finite sets: one finiteness check of the loss and every gradient per
// step, on the device inside the step, that every update reads. Every plan is guarded unless
// kIgnore: the whole-step MLP kernels run the check inside themselves, before any update
// (codegen::MlpGuard).
#ifndef REPRISE_INCLUDE_REPRISE_NON_FINITE_H_
#define REPRISE_INCLUDE_REPRISE_NON_FINITE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise {

// What a step whose loss or gradients hold an inf or a NaN does.
enum class NonFinitePolicy : uint8_t {
  // The update is skipped whole (parameters, optimizer state, the step counter), as loss scaling
  // skips an overflowing step, and counted; training goes on with the next batch.
  kSkipStep,
  // As kSkipStep for that step and every later one (the weights stay as they were before it),
  // and the next Trainer call that waits for the queued steps (Loss, Synchronize, Read,
  // SkippedSteps, SaveWeights...) and every call after it, Step() included, returns
  // FailedPrecondition naming the step and the first non-finite tensor of the step, found by a
  // one-off eager run of the plan. Step() itself never waits for the device, so it reports the
  // stop only once such a call has seen it. GetParameter and SaveWeights still work after a stop,
  // to keep the weights it kept (SaveCheckpoint does not: a stopped trainer's checkpoint would
  // restore stopped). Not with loss scaling, whose overflowing steps are expected
  // (InvalidArgument).
  kStop,
  // Nothing is checked (for speed runs): a NaN reaches the weights.
  kIgnore,
};
absl::string_view NonFinitePolicyName(NonFinitePolicy policy);  // "skip", "stop", "ignore"
absl::StatusOr<NonFinitePolicy> ParseNonFinitePolicy(absl::string_view name);

struct NonFiniteOptions {
  NonFinitePolicy policy = NonFinitePolicy::kSkipStep;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_NON_FINITE_H_
