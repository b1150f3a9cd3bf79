#include "src/api/forward_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/api/compile_options.h"
#include "src/ir/op_def.h"
#include "src/passes/mixed_precision.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// Mixed precision reads a float32 tensor through a 16-bit copy, so a float32 state that an op
// writes in place (a decoder's key/value cache) would be written in the copy: such state must be
// built in the compute dtype.
absl::Status CheckWrittenState(const Graph& graph, DType compute) {
  if (compute == DType::kFloat32) return absl::OkStatus();
  for (const Node& n : graph.nodes()) {
    for (int index : ir::MutatedInputs(n)) {
      const Node& state = graph.node(n.inputs[index].node);
      const DType dtype = state.outputs[0].dtype;
      if (state.op == &ir::StateOp() && IsFloat(dtype) && dtype != compute) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CompileForward: state '", state.name, "' is ", state.outputs[0].ToString(), " and '",
            n.name, "' writes it in place, but the trainer computes in ", DTypeName(compute),
            ": build it in ", DTypeName(compute), " (BuildGpt2Decoder's cache_dtype)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ForwardPlan> BuildForwardPlan(const Graph& graph, absl::Span<const Value> outputs,
                                             const TrainOptions& train,
                                             const codegen::MlpStepTarget& mlp_step_target,
                                             bool fuse) {
  if (outputs.empty()) {
    return absl::InvalidArgumentError("CompileForward needs at least one output to read");
  }
  for (Value v : outputs) {
    if (!graph.SpecOf(v).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("CompileForward: output ", v.node, ":",
                                                     v.output, " is not a value of the graph"));
    }
  }
  RETURN_IF_ERROR(ir::CheckCapturable(graph));
  RETURN_IF_ERROR(CheckWrittenState(graph, train.numerics.compute_dtype));
  ForwardPlan out;
  // Mixed precision as the trainer's: 16-bit compute, the outputs read back as float32.
  ASSIGN_OR_RETURN(
      passes::MixedPrecisionGraph mixed,
      passes::ConvertToMixedPrecision(graph, outputs[0], outputs, train.numerics.compute_dtype));
  const Graph& g = mixed.graph;
  // An input read by several (ids of two tables) takes the tightest range, as the trainer's.
  for (const LabelUse& use : LabelUsesOf(g)) {
    const ForwardPlan::Limit limit{{use.classes, use.padding_allowed}, use.consumer};
    auto [it, added] = out.limits.try_emplace(use.input, limit);
    if (!added && use.classes < it->second.range.classes) it->second = limit;
  }
  autodiff::TrainingGraph forward;
  forward.loss = mixed.loss;
  // No parameters listed: the list is of the parameters the step updates (each with a gradient).
  forward.forward_nodes = g.num_nodes();
  forward.graph = std::move(mixed.graph);
  // The trainer's fusion, on one lane (a runner borrows lane 0's workspace), with nothing to
  // mirror and no whole training step to fuse.
  passes::PlanOptions options = CompileOptionsFor(train, mlp_step_target).plan;
  options.mirror = {};
  options.fuse = fuse;
  options.fusion.whole_mlp_step = false;
  options.lanes = 1;
  ASSIGN_OR_RETURN(out.plan, passes::BuildPlan(std::move(forward), mixed.kept, options));
  RETURN_IF_ERROR(ir::CheckCapturable(out.plan.graph()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    ASSIGN_OR_RETURN(const Value planned, out.plan.MapValue(mixed.kept[i]));
    out.outputs[outputs[i]] = planned;
  }
  const passes::MemoryPlan& memory = out.plan.memory;
  out.parameter_region = memory.arena_bytes;
  for (const passes::Buffer& b : memory.buffers) {
    if (b.cls != passes::BufferClass::kParameter) {
      out.parameter_region = std::min(out.parameter_region, b.offset);
    }
  }
  for (const passes::Buffer& b : memory.buffers) {
    if (b.cls == passes::BufferClass::kParameter && b.offset + b.bytes > out.parameter_region) {
      return absl::InternalError("the forward plan did not place its parameters first");
    }
  }
  return out;
}

absl::Status CheckForwardParameters(
    const passes::Plan& plan,
    const std::function<absl::StatusOr<TensorSpec>(const std::string&)>& lookup) {
  const Graph& g = plan.graph();
  for (int32_t id : g.NodesOf("parameter")) {
    const Node& node = g.node(id);
    absl::StatusOr<TensorSpec> theirs = lookup(node.name);
    if (!theirs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CompileForward: the graph's parameter '", node.name, "' ", node.outputs[0].ToString(),
          " is not a parameter of the trainer (parameters are matched by name)"));
    }
    if (*theirs != node.outputs[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CompileForward: parameter '", node.name, "' is ", node.outputs[0].ToString(),
          " in the graph but ", theirs->ToString(), " in the trainer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace reprise
