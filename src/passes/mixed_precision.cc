#include "src/passes/mixed_precision.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/batch_norm.h"
#include "src/ops/cast.h"
#include "src/ops/masked_loss.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

// Ops that read float32 whatever the rest computes in: the masked loss, whose kernels are
// float32 only (the plain softmax cross-entropy reads 16-bit logits itself).
bool ComputesInFloat32(const Node& node) { return node.op == &ops::MaskedSoftmaxCrossEntropyOp(); }

// Inputs kept in float32 beside 16-bit data: batch norm's gamma, beta and running statistics,
// layer norm's weight and bias.
bool KeepsFloat32Input(const Node& node, int input) {
  return (node.op == &ops::BatchNormTrainOp() || node.op == &ops::BatchNormInferOp() ||
          node.op == &ops::LayerNormOp()) &&
         input >= 1;
}

class Rewriter {
 public:
  Rewriter(const Graph& old, DType compute) : old_(old), compute_(compute) {
    graph_.ShareIdentityWith(old);
  }

  absl::Status Run() {
    for (const Node& node : old_.nodes()) {
      RETURN_IF_ERROR(ir::IsLeaf(node) ? CopyLeaf(node) : CopyOp(node));
    }
    return absl::OkStatus();
  }
  // `v` (a value of the new graph) as `dtype`, through one shared cast when it differs.
  absl::StatusOr<Value> As(Value v, DType dtype) {
    if (graph_.spec(v).dtype == dtype || !IsFloat(graph_.spec(v).dtype)) return v;
    const std::pair<Value, DType> key{v, dtype};
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    const std::string name =
        absl::StrCat(graph_.node(v.node).name, v.output > 0 ? absl::StrCat(":", v.output) : "",
                     ".to_", DTypeName(dtype));
    ASSIGN_OR_RETURN(Value cast,
                     graph_.AddOp1(ops::CastOp(), name, {v}, {{"dtype", ops::DTypeAttr(dtype)}}));
    casts_[key] = cast;
    return cast;
  }
  Graph& graph() { return graph_; }
  absl::flat_hash_map<Value, Value>& values() { return values_; }
  int casts() const { return static_cast<int>(casts_.size()); }

 private:
  absl::Status CopyLeaf(const Node& node) {
    absl::StatusOr<Value> v;
    const TensorSpec& spec = node.outputs[0];
    if (node.op == &ir::InputOp()) v = graph_.AddInput(node.name, spec, node.init);
    if (node.op == &ir::ParameterOp()) v = graph_.AddParameter(node.name, spec, node.init);
    if (node.op == &ir::StateOp()) v = graph_.AddState(node.name, spec, node.init);
    if (node.op == &ir::ConstantOp()) v = graph_.AddConstant(node.name, spec, node.init);
    RETURN_IF_ERROR(v.status());
    values_[Value{node.id, 0}] = *v;
    return absl::OkStatus();
  }

  absl::Status CopyOp(const Node& node) {
    std::vector<Value> inputs;
    for (int i = 0; i < static_cast<int>(node.inputs.size()); ++i) {
      const Value v = values_.at(node.inputs[i]);
      const bool float32 = ComputesInFloat32(node) || KeepsFloat32Input(node, i);
      ASSIGN_OR_RETURN(Value typed, As(v, float32 ? DType::kFloat32 : compute_));
      inputs.push_back(typed);
    }
    ASSIGN_OR_RETURN(std::vector<Value> outs,
                     graph_.AddOp(*node.op, node.name, std::move(inputs), node.attrs));
    for (int o = 0; o < static_cast<int>(outs.size()); ++o) values_[Value{node.id, o}] = outs[o];
    for (int32_t c : node.control_inputs) {
      RETURN_IF_ERROR(graph_.AddControlEdge(values_.at(Value{c, 0}).node, outs[0].node));
    }
    return absl::OkStatus();
  }

  const Graph& old_;
  const DType compute_;
  Graph graph_;
  absl::flat_hash_map<Value, Value> values_;
  absl::flat_hash_map<std::pair<Value, DType>, Value> casts_;
};

}  // namespace

absl::StatusOr<MixedPrecisionGraph> ConvertToMixedPrecision(const Graph& graph, Value loss,
                                                            absl::Span<const Value> keep,
                                                            DType compute) {
  RETURN_IF_ERROR(graph.SpecOf(loss).status());
  for (Value v : keep) RETURN_IF_ERROR(graph.SpecOf(v).status());
  MixedPrecisionGraph out;
  if (compute == DType::kFloat32) {
    out.graph = graph;
    out.loss = loss;
    out.kept.assign(keep.begin(), keep.end());
    for (const Node& n : graph.nodes()) {
      for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) {
        out.values[Value{n.id, o}] = Value{n.id, o};
      }
    }
    return out;
  }
  if (!IsLowPrecision(compute)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mixed precision computes in bf16 or f16, not ", DTypeName(compute)));
  }
  Rewriter rewriter(graph, compute);
  RETURN_IF_ERROR(rewriter.Run());
  absl::flat_hash_map<Value, Value>& values = rewriter.values();
  for (Value v : keep) {  // Read back as float32: Trainer::Read returns floats.
    ASSIGN_OR_RETURN(Value readable, rewriter.As(values.at(v), DType::kFloat32));
    values[v] = readable;
    out.kept.push_back(readable);
  }
  ASSIGN_OR_RETURN(out.loss, rewriter.As(values.at(loss), DType::kFloat32));
  out.casts = rewriter.casts();
  out.values = std::move(values);
  out.graph = std::move(rewriter.graph());
  return out;
}

}  // namespace reprise::passes
