// The optimizer part of the training graph: one update node per parameter (sgd_momentum or adam),
// the scalar inputs that carry the hyperparameters, and the nodes that compute each step's
// scalars on the device: the scheduled learning rate (lr_schedule, from the device step counter),
// the global gradient-norm clip coefficient (grad_sum_squares, clip_coefficient) and, with loss
// scaling, the check of the gradients (grad_nonfinite, loss_scale_check) that every update and the
// norm read, and the scale's update after them (loss_scale_update); with the non-finite guard
// (src/autodiff/non_finite_guard.h), the same check without scaling and its counter.
#ifndef REPRISE_SRC_AUTODIFF_OPTIMIZER_GRAPH_H_
#define REPRISE_SRC_AUTODIFF_OPTIMIZER_GRAPH_H_

#include "absl/status/status.h"
#include "reprise/optimizer.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/non_finite_guard.h"

namespace reprise::autodiff {

// Names of the further scalar inputs (beside kLearningRate, kMomentum, kWeightDecay).
inline constexpr char kBeta1[] = "beta1";
inline constexpr char kBeta2[] = "beta2";
inline constexpr char kEpsilon[] = "epsilon";
inline constexpr char kMaxGradNorm[] = "max_grad_norm";
// The constant 0 weight decay of rank-1 parameters when OptimizerOptions::decay_rank1 is false.
inline constexpr char kNoWeightDecay[] = "weight_decay.none";
// The scheduled rate and the global norm's nodes.
inline constexpr char kScheduledRate[] = "learning_rate.scheduled";
inline constexpr char kGradNorm[] = "grad_norm";

// The OptimizerOptions that SgdOptions stand for.
OptimizerOptions FromSgd(const SgdOptions& sgd);

// InvalidArgument naming the field and its value for options no optimizer can run with: a
// negative or non-finite rate, momentum, weight decay, epsilon or clip norm; a beta outside
// [0, 1); Nesterov without momentum; a warm-up longer than the schedule, a cosine floor outside
// [0, 1], a step decay with step_size < 1 or gamma outside (0, 1].
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

// InvalidArgument naming the field and its value for a scale that is not finite and positive, or,
// for kDynamic, a growth factor not above 1, a backoff factor outside (0, 1) or a growth interval
// below 1; and for a mode that is not a known LossScaling.
absl::Status ValidateLossScaleOptions(const LossScaleOptions& scaling);

// `scaling` with kAuto resolved for a step computing in `compute`: kDynamic for float16, kOff
// otherwise.
LossScaleOptions ResolveLossScaling(LossScaleOptions scaling, DType compute);

// Adds the optimizer to `t` (its backward pass built): inputs, state ("<param>.momentum" for SGD,
// "<param>.exp_avg" and "<param>.exp_avg_sq" for Adam), per-step scalar nodes and one update per
// parameter, run after every other reader of the parameter. Adam and schedules read the device
// step counter kStepCounter, added as state if the graph has none; the caller advances it. When
// `scaling` scales the loss (the backward was built with it, so the state kLossScale exists), the
// loss-scale check, the updates' unscale-or-skip and the scale's update come too; `guard` adds the
// loss to that check, or without loss scaling adds the guard's own check and counter
// (src/autodiff/non_finite_guard.h), read by every update alike.
absl::Status AddOptimizer(const OptimizerOptions& options, const LossScaleOptions& scaling,
                          TrainingGraph& t, const NonFiniteOptions& guard = kNoGuard);

}  // namespace reprise::autodiff

#endif  // REPRISE_SRC_AUTODIFF_OPTIMIZER_GRAPH_H_
