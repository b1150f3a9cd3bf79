#include "reprise/nn.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/autodiff/autodiff.h"
#include "src/ops/masked_loss.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::nn {

static_assert(kPaddingLabel == ops::kPaddingLabel, "the masked loss skips nn::kPaddingLabel");

namespace {
absl::StatusOr<Value> LinearSteps(Graph& graph, Value x, int64_t out_features,
                                  absl::string_view name, bool bias) {
  ASSIGN_OR_RETURN(TensorSpec x_spec, graph.SpecOf(x));
  if (x_spec.shape.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear '", name, "': input must be [batch, features], got ", x_spec.ToString()));
  }
  if (out_features <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear '", name, "': out_features must be positive, got ", out_features));
  }
  const int64_t in_features = x_spec.shape.dim(1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  ASSIGN_OR_RETURN(Value w, graph.AddParameter(absl::StrCat(name, ".weight"),
                                               {Shape{out_features, in_features}, x_spec.dtype},
                                               Initializer::Uniform(-bound, bound)));
  ASSIGN_OR_RETURN(Value y, graph.AddOp1(ops::MatmulOp(), absl::StrCat(name, ".matmul"), {x, w},
                                         {{"transpose_b", true}}));
  if (!bias) return y;
  ASSIGN_OR_RETURN(
      Value b, graph.AddParameter(absl::StrCat(name, ".bias"), {Shape{out_features}, x_spec.dtype},
                                  Initializer::Uniform(-bound, bound)));
  return graph.AddOp1(ops::BiasAddOp(), absl::StrCat(name, ".bias_add"), {y, b});
}
}  // namespace

absl::StatusOr<Value> Linear(Graph& graph, Value x, int64_t out_features, absl::string_view name,
                             bool bias) {
  return Transactional(graph, [&] { return LinearSteps(graph, x, out_features, name, bias); });
}

absl::StatusOr<Value> Relu(Graph& graph, Value x, absl::string_view name) {
  return graph.AddOp1(ops::ReluOp(), name, {x});
}

absl::StatusOr<Value> Add(Graph& graph, Value a, Value b, absl::string_view name) {
  return graph.AddOp1(ops::AddOp(), name, {a, b});
}

namespace {
absl::StatusOr<Value> DropoutSteps(Graph& graph, Value x, double rate, absl::string_view name,
                                   uint64_t seed) {
  if (!(rate >= 0 && rate < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout '", name, "': rate must be in [0, 1), got ", rate));
  }
  Value step;
  if (auto found = graph.FindNode(autodiff::kStepCounter); found.ok()) {
    step = Value{*found, 0};
  } else {
    ASSIGN_OR_RETURN(step, graph.AddState(autodiff::kStepCounter, {Shape{2}, DType::kInt32},
                                          Initializer::Zeros()));
  }
  // Each layer's own stream of numbers: FNV-1a of its name.
  uint32_t stream = 2166136261u;
  for (char c : name) stream = (stream ^ static_cast<uint8_t>(c)) * 16777619u;
  return graph.AddOp1(ops::DropoutOp(), name, {x, step},
                      {{"rate", rate},
                       {"seed", static_cast<int64_t>(seed)},
                       {"stream", static_cast<int64_t>(stream)}});
}
}  // namespace

absl::StatusOr<Value> Dropout(Graph& graph, Value x, double rate, absl::string_view name,
                              uint64_t seed) {
  return Transactional(graph, [&] { return DropoutSteps(graph, x, rate, name, seed); });
}

absl::StatusOr<Value> MaskedSoftmaxCrossEntropy(Graph& graph, Value logits, Value labels,
                                                absl::string_view name) {
  return graph.AddOp1(ops::MaskedSoftmaxCrossEntropyOp(), name, {logits, labels});
}

absl::StatusOr<Value> SoftmaxCrossEntropy(Graph& graph, Value logits, Value labels,
                                          absl::string_view name) {
  return graph.AddOp1(ops::SoftmaxCrossEntropyOp(), name, {logits, labels});
}

}  // namespace reprise::nn
