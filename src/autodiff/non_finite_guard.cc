#include "src/autodiff/non_finite_guard.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/gradient_as_computed.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::string_view NonFinitePolicyName(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kSkipStep:
      return "skip";
    case NonFinitePolicy::kStop:
      return "stop";
    case NonFinitePolicy::kIgnore:
      return "ignore";
  }
  return "unknown";
}

absl::StatusOr<NonFinitePolicy> ParseNonFinitePolicy(absl::string_view name) {
  for (NonFinitePolicy p :
       {NonFinitePolicy::kSkipStep, NonFinitePolicy::kStop, NonFinitePolicy::kIgnore}) {
    if (name == NonFinitePolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown non-finite policy '", name, "' (want skip, stop or ignore)"));
}

}  // namespace reprise

namespace reprise::autodiff {

absl::Status ValidateNonFiniteOptions(const NonFiniteOptions& options,
                                      const LossScaleOptions& scaling) {
  switch (options.policy) {
    case NonFinitePolicy::kSkipStep:
    case NonFinitePolicy::kIgnore:
      return absl::OkStatus();
    case NonFinitePolicy::kStop:
      if (ScalesLoss(scaling)) {
        return absl::InvalidArgumentError(
            "NonFiniteOptions::policy kStop cannot run with loss scaling, whose overflowing steps "
            "are expected and skipped (the scale backs off): use kSkipStep");
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("NonFiniteOptions::policy is not a known NonFinitePolicy (",
                   static_cast<int>(options.policy), ")"));
}

Value GradientAsComputed(const Graph& g, Value gradient) {
  // A mixed-precision gradient is the widening cast of the 16-bit one the backward made.
  const Node& made = g.node(gradient.node);
  if (made.op == &ops::CastOp() && IsLowPrecision(g.spec(made.inputs[0]).dtype) &&
      g.spec(gradient).dtype == DType::kFloat32) {
    return made.inputs[0];
  }
  return gradient;
}

absl::StatusOr<std::optional<Value>> AddNonFiniteCheck(const NonFiniteOptions& options,
                                                       const LossScaleOptions& scaling,
                                                       TrainingGraph& t) {
  RETURN_IF_ERROR(ValidateNonFiniteOptions(options, scaling));
  const bool scaled = ScalesLoss(scaling);
  if (!Guards(options) && !scaled) return std::nullopt;
  Graph& g = t.graph;
  std::vector<Value> checked;
  for (int32_t param : t.parameters) {
    checked.push_back(GradientAsComputed(g, t.gradients.at(param)));
  }
  if (checked.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(scaled ? "loss scaling" : "the non-finite guard",
                                                   " needs a loss that depends on a parameter"));
  }
  // The loss too: with every gradient finite it can still be an inf (a log of 0), which the
  // report would show while the weights look fine. Loss scaling alone (kIgnore) keeps its check
  // as it always was: the gradients only.
  if (Guards(options)) checked.push_back(t.loss);
  const char* name = scaled ? kLossScaleCheck : kNonFiniteCheck;
  ASSIGN_OR_RETURN(Value flags,
                   g.AddOp1(ops::GradNonfiniteOp(), absl::StrCat(name, ".flags"), checked));
  t.optimizer_nodes.push_back(flags.node);
  std::vector<Value> inputs = {flags};
  Attrs attrs;
  if (scaled) {
    ASSIGN_OR_RETURN(const int32_t scale, g.FindNode(kLossScale));
    inputs.push_back(Value{scale, 0});
  } else {
    // The check also moves the guard's counters on (attr count), in the same launch.
    ASSIGN_OR_RETURN(Value skipped, g.AddState(kNonFiniteSkippedSteps, {Shape{}, DType::kInt32},
                                               Initializer::Zeros()));
    ASSIGN_OR_RETURN(Value record,
                     g.AddState(kNonFiniteRecord, {Shape{2}, DType::kInt32}, Initializer::Zeros()));
    inputs.push_back(skipped);
    inputs.push_back(record);
    attrs["count"] = true;
    // kStop: once a step was found non-finite, every later update is skipped too, so that the
    // weights stay those the non-finite step started from until the host hears of it.
    if (options.policy == NonFinitePolicy::kStop) attrs["sticky"] = true;
  }
  ASSIGN_OR_RETURN(Value check,
                   g.AddOp1(ops::LossScaleCheckOp(), name, std::move(inputs), std::move(attrs)));
  t.optimizer_nodes.push_back(check.node);
  return check;
}

absl::StatusOr<int32_t> FindStepCheck(const Graph& g) {
  if (auto check = g.FindNode(kLossScaleCheck); check.ok()) return *check;
  return g.FindNode(kNonFiniteCheck);
}

}  // namespace reprise::autodiff
