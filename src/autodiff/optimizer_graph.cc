#include "src/autodiff/optimizer_graph.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/autodiff/gradient_as_computed.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::autodiff {
namespace {

absl::Status Check(bool ok, absl::string_view field, double value, absl::string_view want) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("OptimizerOptions::", field, " must be ", want, ", got ", value));
}

absl::Status CheckNonNegative(absl::string_view field, float value) {
  return Check(std::isfinite(value) && value >= 0, field, value, "finite and at least 0");
}

absl::Status ValidateSchedule(const LrSchedule& s) {
  RETURN_IF_ERROR(Check(s.warmup_steps >= 0, "schedule.warmup_steps",
                        static_cast<double>(s.warmup_steps), "at least 0"));
  switch (s.decay) {
    case LrDecay::kConstant:
      if (s.total_steps > 0 && s.warmup_steps > s.total_steps) {
        return absl::InvalidArgumentError(
            absl::StrCat("OptimizerOptions::schedule: the warm-up (", s.warmup_steps,
                         " steps) is longer than total_steps (", s.total_steps, ")"));
      }
      return absl::OkStatus();
    case LrDecay::kCosine:
      if (s.total_steps <= s.warmup_steps) {
        return absl::InvalidArgumentError(
            absl::StrCat("OptimizerOptions::schedule: a cosine decay needs total_steps (",
                         s.total_steps, ") greater than the warm-up (", s.warmup_steps, " steps)"));
      }
      return Check(s.min_lr_factor >= 0 && s.min_lr_factor <= 1, "schedule.min_lr_factor",
                   s.min_lr_factor, "in [0, 1]");
    case LrDecay::kStep:
      if (s.total_steps > 0 && s.warmup_steps > s.total_steps) {
        return absl::InvalidArgumentError(
            absl::StrCat("OptimizerOptions::schedule: the warm-up (", s.warmup_steps,
                         " steps) is longer than total_steps (", s.total_steps, ")"));
      }
      RETURN_IF_ERROR(Check(s.step_size >= 1, "schedule.step_size",
                            static_cast<double>(s.step_size), "at least 1"));
      return Check(s.gamma > 0 && s.gamma <= 1, "schedule.gamma", s.gamma, "in (0, 1]");
  }
  return absl::InvalidArgumentError("OptimizerOptions::schedule.decay is not a known LrDecay");
}

bool Scheduled(const LrSchedule& s) { return s.warmup_steps > 0 || s.decay != LrDecay::kConstant; }

Attrs ScheduleAttrs(const LrSchedule& s) {
  const char* decay = s.decay == LrDecay::kCosine ? "cosine"
                      : s.decay == LrDecay::kStep ? "step"
                                                  : "constant";
  return {{"warmup_steps", s.warmup_steps}, {"decay", std::string(decay)},
          {"total_steps", s.total_steps},   {"min_factor", double{s.min_lr_factor}},
          {"step_size", s.step_size},       {"gamma", double{s.gamma}}};
}

absl::StatusOr<Value> StepCounter(Graph& g) {
  if (auto found = g.FindNode(kStepCounter); found.ok()) return Value{*found, 0};
  return g.AddState(kStepCounter, {Shape{2}, DType::kInt32}, Initializer::Zeros());
}

}  // namespace

OptimizerOptions FromSgd(const SgdOptions& sgd) {
  return {.kind = OptimizerKind::kSgd,
          .learning_rate = sgd.learning_rate,
          .momentum = sgd.momentum,
          .weight_decay = sgd.weight_decay};
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  RETURN_IF_ERROR(CheckNonNegative("learning_rate", o.learning_rate));
  RETURN_IF_ERROR(CheckNonNegative("weight_decay", o.weight_decay));
  RETURN_IF_ERROR(CheckNonNegative("max_grad_norm", o.max_grad_norm));
  switch (o.kind) {
    case OptimizerKind::kSgd:
      RETURN_IF_ERROR(CheckNonNegative("momentum", o.momentum));
      if (o.nesterov && o.momentum == 0) {
        return absl::InvalidArgumentError(
            "OptimizerOptions::nesterov needs a momentum greater than 0");
      }
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      RETURN_IF_ERROR(Check(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "in [0, 1)"));
      RETURN_IF_ERROR(Check(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "in [0, 1)"));
      // At 0 a parameter whose gradient has been 0 so far would update by 0 / 0 = NaN.
      RETURN_IF_ERROR(Check(std::isfinite(o.epsilon) && o.epsilon > 0, "epsilon", o.epsilon,
                            "finite and greater than 0"));
      break;
    default:
      return absl::InvalidArgumentError("OptimizerOptions::kind is not a known OptimizerKind");
  }
  return ValidateSchedule(o.schedule);
}

absl::Status ValidateLossScaleOptions(const LossScaleOptions& s) {
  switch (s.mode) {
    case LossScaling::kAuto:
    case LossScaling::kOff:
    case LossScaling::kStatic:
    case LossScaling::kDynamic:
      break;
    default:
      return absl::InvalidArgumentError("LossScaleOptions::mode is not a known LossScaling");
  }
  const bool used = s.mode != LossScaling::kOff;
  if (used && !(std::isfinite(s.init_scale) && s.init_scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LossScaleOptions::init_scale must be finite and greater than 0, got ", s.init_scale));
  }
  if (s.mode == LossScaling::kStatic || s.mode == LossScaling::kOff) return absl::OkStatus();
  if (!(std::isfinite(s.growth_factor) && s.growth_factor > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LossScaleOptions::growth_factor must be finite and greater than 1, got ",
                     s.growth_factor));
  }
  if (!(s.backoff_factor > 0 && s.backoff_factor < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LossScaleOptions::backoff_factor must be in (0, 1), got ", s.backoff_factor));
  }
  if (s.growth_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LossScaleOptions::growth_interval must be at least 1, got ", s.growth_interval));
  }
  return absl::OkStatus();
}

LossScaleOptions ResolveLossScaling(LossScaleOptions scaling, DType compute) {
  if (scaling.mode == LossScaling::kAuto) {
    scaling.mode = compute == DType::kFloat16 ? LossScaling::kDynamic : LossScaling::kOff;
  }
  return scaling;
}

namespace {

// The scale's update, after every reader of the scale (the backward's seed, the check).
absl::Status AddLossScaleUpdate(const LossScaleOptions& s, Value check, TrainingGraph& t) {
  Graph& g = t.graph;
  ASSIGN_OR_RETURN(const int32_t scale, g.FindNode(kLossScale));
  const TensorSpec counter{Shape{}, DType::kInt32};
  ASSIGN_OR_RETURN(Value tracker,
                   g.AddState(kLossScaleGrowthTracker, counter, Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value skipped,
                   g.AddState(kLossScaleSkippedSteps, counter, Initializer::Zeros()));
  // A static scale: the same machine with factors of 1, so that skipped steps are still counted.
  const bool dynamic = s.mode == LossScaling::kDynamic;
  const Attrs attrs = {{"growth_factor", dynamic ? double{s.growth_factor} : 1.0},
                       {"backoff_factor", dynamic ? double{s.backoff_factor} : 1.0},
                       {"growth_interval", dynamic ? s.growth_interval : int64_t{1}}};
  ASSIGN_OR_RETURN(std::vector<Value> none,
                   g.AddOp(ops::LossScaleUpdateOp(), absl::StrCat(kLossScale, ".update"),
                           {Value{scale, 0}, tracker, skipped, check}, attrs));
  const int32_t update = g.num_nodes() - 1;
  RETURN_IF_ERROR(RunAfterEveryReader(g, scale, update));
  t.optimizer_nodes.push_back(update);
  return absl::OkStatus();
}

}  // namespace

absl::Status AddOptimizer(const OptimizerOptions& o, const LossScaleOptions& scaling,
                          TrainingGraph& t, const NonFiniteOptions& guard) {
  RETURN_IF_ERROR(ValidateOptimizerOptions(o));
  RETURN_IF_ERROR(ValidateLossScaleOptions(scaling));
  Graph& g = t.graph;
  // The check every update reads to skip a non-finite step (and, scaling, to unscale): loss
  // scaling's, or the non-finite guard's with an unscale factor of 1.
  std::vector<Value> check;
  const bool scaled = ScalesLoss(scaling);
  // The norm's partial sums of the gradients (16-bit ones before their widening cast: the kernel
  // widens them exactly on load).
  auto add_partials = [&](std::vector<Value> grads, Attrs attrs) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(Value partials,
                     g.AddOp1(ops::GradSumSquaresOp(), absl::StrCat(kGradNorm, ".partials"),
                              std::move(grads), std::move(attrs)));
    t.optimizer_nodes.push_back(partials.node);
    return partials;
  };
  std::vector<Value> grads;
  for (int32_t param : t.parameters) grads.push_back(GradientAsComputed(g, t.gradients.at(param)));
  // Unscaled, the partial sums come right before the guard's check of the same gradients, so that
  // the fuse pass can make both in one pass (grad_sum_squares_nonfinite).
  std::optional<Value> partials;
  if (o.max_grad_norm > 0 && !scaled) {
    ASSIGN_OR_RETURN(partials, add_partials(grads, {}));
  }
  ASSIGN_OR_RETURN(std::optional<Value> step_check, AddNonFiniteCheck(guard, scaling, t));
  if (step_check.has_value()) check.push_back(*step_check);
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  auto input = [&](const char* name, float value) {
    return g.AddInput(name, scalar, Initializer::Constant(value));
  };
  const bool adam = o.kind != OptimizerKind::kSgd;
  ASSIGN_OR_RETURN(Value lr, input(kLearningRate, o.learning_rate));
  // The per-tensor inputs are followed by these, as the update ops order them.
  std::vector<Value> before_decay;
  Value step;
  if (adam || Scheduled(o.schedule)) {
    ASSIGN_OR_RETURN(step, StepCounter(g));
  }
  if (adam) {
    ASSIGN_OR_RETURN(Value beta1, input(kBeta1, o.beta1));
    ASSIGN_OR_RETURN(Value beta2, input(kBeta2, o.beta2));
    ASSIGN_OR_RETURN(Value epsilon, input(kEpsilon, o.epsilon));
    before_decay = {step, beta1, beta2, epsilon};
  } else {
    ASSIGN_OR_RETURN(Value mu, input(kMomentum, o.momentum));
    before_decay = {mu};
  }
  ASSIGN_OR_RETURN(Value wd, input(kWeightDecay, o.weight_decay));
  Value no_decay = wd;
  if (!o.decay_rank1) {
    ASSIGN_OR_RETURN(no_decay, g.AddConstant(kNoWeightDecay, scalar, Initializer::Zeros()));
  }
  if (Scheduled(o.schedule)) {
    ASSIGN_OR_RETURN(
        lr, g.AddOp1(ops::LrScheduleOp(), kScheduledRate, {lr, step}, ScheduleAttrs(o.schedule)));
    t.optimizer_nodes.push_back(lr.node);
  }
  std::vector<Value> clip;  // The clip coefficient, when clipping.
  if (o.max_grad_norm > 0) {
    ASSIGN_OR_RETURN(Value max_norm, input(kMaxGradNorm, o.max_grad_norm));
    // The norm of unscaled gradients. The guard alone has nothing to unscale: a non-finite
    // gradient makes the norm non-finite, and the updates skip the step whatever it is.
    if (scaled) {
      grads.insert(grads.end(), check.begin(), check.end());
      ASSIGN_OR_RETURN(partials, add_partials(grads, {{"loss_scaled", true}}));
    }
    ASSIGN_OR_RETURN(std::vector<Value> norm,
                     g.AddOp(ops::ClipCoefficientOp(), kGradNorm, {*partials, max_norm}));
    t.optimizer_nodes.push_back(norm[1].node);
    clip.push_back(norm[1]);
  }
  for (int32_t param : t.parameters) {
    const std::string name = g.node(param).name;
    const TensorSpec spec = g.node(param).outputs[0];
    std::vector<Value> inputs = {Value{param, 0}, t.gradients.at(param)};
    const char* suffix = ".sgd";
    Attrs attrs;
    if (adam) {
      for (const char* state : {".exp_avg", ".exp_avg_sq"}) {
        ASSIGN_OR_RETURN(Value s,
                         g.AddState(absl::StrCat(name, state), spec, Initializer::Zeros()));
        inputs.push_back(s);
      }
      suffix = o.kind == OptimizerKind::kAdamW ? ".adamw" : ".adam";
      attrs["decoupled"] = o.kind == OptimizerKind::kAdamW;
    } else {
      ASSIGN_OR_RETURN(Value velocity,
                       g.AddState(absl::StrCat(name, ".momentum"), spec, Initializer::Zeros()));
      inputs.push_back(velocity);
      if (o.nesterov) attrs["nesterov"] = true;
    }
    inputs.push_back(lr);
    inputs.insert(inputs.end(), before_decay.begin(), before_decay.end());
    inputs.push_back(spec.shape.rank() == 1 ? no_decay : wd);
    inputs.insert(inputs.end(), clip.begin(), clip.end());
    inputs.insert(inputs.end(), check.begin(), check.end());
    if (!check.empty()) attrs["loss_scaled"] = true;
    ASSIGN_OR_RETURN(std::vector<Value> none,
                     g.AddOp(adam ? ops::AdamOp() : ops::SgdMomentumOp(),
                             absl::StrCat(name, suffix), std::move(inputs), std::move(attrs)));
    const int32_t update = g.num_nodes() - 1;
    RETURN_IF_ERROR(RunAfterEveryReader(g, param, update));
    t.optimizer_nodes.push_back(update);
  }
  if (scaled) RETURN_IF_ERROR(AddLossScaleUpdate(scaling, check[0], t));
  return absl::OkStatus();
}

}  // namespace reprise::autodiff
