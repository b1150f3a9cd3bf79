#include "src/api/input_checks.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/ops/batched.h"
#include "src/ops/loss_checks.h"
#include "src/ops/masked_loss.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/schedule.h"
#include "src/util/status_macros.h"

namespace reprise {

namespace {

// The input `v` is a copy of, through ops that only move its elements; nullopt if none.
std::optional<int32_t> SourceInput(const Graph& g, Value v) {
  while (true) {
    const Node& n = g.node(v.node);
    if (n.op == &ir::InputOp()) return n.id;
    if (n.op != &ops::ReshapeOp() && n.op != &ops::FlattenOp() && n.op != &ops::ModelTileOp()) {
      return std::nullopt;
    }
    v = n.inputs[0];
  }
}

}  // namespace

std::vector<LabelUse> LabelUsesOf(const Graph& training) {
  std::vector<LabelUse> uses;
  for (const Node& n : training.nodes()) {
    const bool embedding = n.op == &ops::EmbeddingOp();
    const bool batched_loss = n.op == &ops::BatchedSoftmaxCrossEntropyOp();
    const bool masked_loss = n.op == &ops::MaskedSoftmaxCrossEntropyOp();
    if (!embedding && n.op != &ops::SoftmaxCrossEntropyOp() && !batched_loss && !masked_loss) {
      continue;
    }
    // Token ids (input 0) index a table's rows (input 1's first dimension) as labels (input 1)
    // index a loss's classes (the logits' last dimension).
    const Value labels = n.inputs[embedding ? 0 : 1];
    const std::optional<int32_t> input = SourceInput(training, labels);
    if (!input.has_value()) continue;
    int64_t classes = embedding ? training.spec(n.inputs[1]).shape.dim(0)
                                : training.spec(n.inputs[0]).shape.dim(batched_loss ? 2 : 1);
    if (n.op == &ops::SoftmaxCrossEntropyOp()) {  // Its real classes, padding columns left out.
      absl::StatusOr<int64_t> real = ops::LossClasses(n.attrs, training.spec(n.inputs[0]));
      if (real.ok()) classes = *real;
    }
    uses.push_back({training.node(*input).name, classes, n.name, masked_loss});
  }
  return uses;
}

absl::Status CheckLabels(absl::string_view input, absl::string_view consumer, LabelRange range,
                         absl::Span<const int32_t> labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const int32_t label = labels[i];
    if (label >= 0 && label < range.classes) continue;
    if (range.padding_allowed && label == nn::kPaddingLabel) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", input, "': label ", label, " at index ", i, " is outside [0, ", range.classes,
        ")",
        range.padding_allowed ? absl::StrCat(" and not the padding label ", nn::kPaddingLabel) : "",
        " of '", consumer, "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckHyperparameterInput(absl::string_view input, float value) {
  const bool non_negative = input == autodiff::kLearningRate || input == autodiff::kMomentum ||
                            input == autodiff::kWeightDecay || input == autodiff::kMaxGradNorm;
  const bool unit = input == autodiff::kBeta1 || input == autodiff::kBeta2;
  if (non_negative && !(std::isfinite(value) && value >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", input, "' must be finite and at least 0, got ", value));
  }
  // Adam's: at 0 a parameter whose gradient has been 0 so far would update by 0 / 0.
  if (input == autodiff::kEpsilon && !(std::isfinite(value) && value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", input, "' must be finite and greater than 0, got ", value));
  }
  if (unit && !(value >= 0 && value < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", input, "' must be in [0, 1), got ", value));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckEnum(bool known, absl::string_view field, int value) {
  if (known) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("TrainOptions::", field, " is ", value, ", not a known value"));
}

}  // namespace

absl::Status CheckValuesOfGraph(const Graph& graph, Value loss, absl::Span<const Value> fetch) {
  if (absl::Status s = graph.SpecOf(loss).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the loss: ", s.message()));
  }
  for (size_t i = 0; i < fetch.size(); ++i) {
    if (absl::Status s = graph.SpecOf(fetch[i]).status(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TrainOptions::fetch[", i, "]: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(CheckEnum(o.launch.mode == ExecMode::kSync ||
                                o.launch.mode == ExecMode::kBulked ||
                                o.launch.mode == ExecMode::kGraph,
                            "launch.mode", static_cast<int>(o.launch.mode)));
  RETURN_IF_ERROR(CheckEnum(o.launch.graph_launch == GraphLaunch::kAuto ||
                                o.launch.graph_launch == GraphLaunch::kHost ||
                                o.launch.graph_launch == GraphLaunch::kDevice,
                            "launch.graph_launch", static_cast<int>(o.launch.graph_launch)));
  RETURN_IF_ERROR(CheckEnum(o.kernels.channels_last == ChannelsLast::kAuto ||
                                o.kernels.channels_last == ChannelsLast::kOn ||
                                o.kernels.channels_last == ChannelsLast::kOff,
                            "kernels.channels_last", static_cast<int>(o.kernels.channels_last)));
  RETURN_IF_ERROR(CheckEnum(o.mirror.policy == MirrorOptions::Policy::kOff ||
                                o.mirror.policy == MirrorOptions::Policy::kAuto ||
                                o.mirror.policy == MirrorOptions::Policy::kBudget,
                            "mirror.policy", static_cast<int>(o.mirror.policy)));
  if (o.numerics.compute_dtype != DType::kFloat32 && o.numerics.compute_dtype != DType::kBFloat16 &&
      o.numerics.compute_dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::numerics.compute_dtype must be f32, bf16 or f16, got ",
                     DTypeName(o.numerics.compute_dtype)));
  }
  if (absl::Status s = autodiff::ValidateOptimizerOptions(o.optimizer); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("TrainOptions::optimizer: ", s.message()));
  }
  RETURN_IF_ERROR(autodiff::ValidateLossScaleOptions(o.numerics.loss_scale));
  if (o.launch.lanes < 0 || o.launch.lanes > passes::kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::launch.lanes must be 0 (auto) or 1 to ", passes::kMaxLanes,
                     ", got ", o.launch.lanes));
  }
  if (o.parallel.ensemble_min_models < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::parallel.ensemble_min_models must be at least 1, got ",
                     o.parallel.ensemble_min_models));
  }
  if (o.kernels.ensemble_whole_step_max_models < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainOptions::kernels.ensemble_whole_step_max_models must be -1 (auto) or at least "
        "0, got ",
        o.kernels.ensemble_whole_step_max_models));
  }
  if (o.kernels.residual_sums_min_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::kernels.residual_sums_min_elements must be at least 0, got ",
                     o.kernels.residual_sums_min_elements));
  }
  if (o.kernels.head_loss_chunks < -1 || o.kernels.head_loss_chunks > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainOptions::kernels.head_loss_chunks must be -1 (chosen) or in [0, 64], got ",
        o.kernels.head_loss_chunks));
  }
  if (o.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::device must be at least 0, got ", o.device));
  }
  return absl::OkStatus();
}

}  // namespace reprise
