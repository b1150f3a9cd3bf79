#include "src/autodiff/autodiff.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::autodiff {
namespace {

// Which nodes lie on a path from a parameter to the loss: only they need gradients.
struct Relevance {
  std::vector<bool> depends_on_parameter;
  std::vector<bool> reaches_loss;
};

Relevance FindRelevant(const Graph& g, Value loss) {
  Relevance r{std::vector<bool>(g.num_nodes()), std::vector<bool>(g.num_nodes())};
  for (const Node& n : g.nodes()) {
    bool dep = n.op == &ir::ParameterOp();
    for (const Value& v : n.inputs) dep = dep || r.depends_on_parameter[v.node];
    r.depends_on_parameter[n.id] = dep;
  }
  r.reaches_loss[loss.node] = true;
  for (int32_t id = loss.node; id >= 0; --id) {
    if (!r.reaches_loss[id]) continue;
    for (const Value& v : g.node(id).inputs) r.reaches_loss[v.node] = true;
  }
  return r;
}

// Sums the gradient contributions to one value, in the order they arrived.
absl::StatusOr<Value> SumContributions(Graph& g, const std::string& base,
                                       const std::vector<Value>& parts) {
  Value sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    ASSIGN_OR_RETURN(sum,
                     g.AddOp1(ops::AddOp(), absl::StrCat(base, ".grad_sum", i), {sum, parts[i]}));
  }
  return sum;
}

}  // namespace

bool ScalesLoss(const LossScaleOptions& scaling) {
  return scaling.mode == LossScaling::kStatic || scaling.mode == LossScaling::kDynamic;
}

absl::StatusOr<TrainingGraph> BuildBackward(const Graph& forward, Value loss,
                                            const LossScaleOptions& scaling) {
  ASSIGN_OR_RETURN(TensorSpec loss_spec, forward.SpecOf(loss));
  if (loss_spec.shape.rank() != 0 || loss_spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", forward.node(loss.node).name,
                                                   "' must be an f32 scalar, got ",
                                                   loss_spec.ToString()));
  }
  TrainingGraph t{forward, loss, {}, {}, {}, forward.num_nodes()};
  Graph& g = t.graph;
  const Relevance rel = FindRelevant(forward, loss);
  absl::flat_hash_map<Value, std::vector<Value>> contributions;
  ASSIGN_OR_RETURN(
      Value seed, ScalesLoss(scaling)
                      ? g.AddState(kLossScale, loss_spec, Initializer::Constant(scaling.init_scale))
                      : g.AddConstant(absl::StrCat(forward.node(loss.node).name, ".seed_grad"),
                                      loss_spec, Initializer::Constant(1.0)));
  contributions[loss].push_back(seed);

  for (int32_t id = loss.node; id >= 0; --id) {
    const Node node = forward.node(id);  // A copy: adding nodes may move the graph's storage.
    if (ir::IsLeaf(node) || !rel.reaches_loss[id] || !rel.depends_on_parameter[id]) continue;
    std::vector<Value> output_grads(node.outputs.size());
    bool any = false;
    for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
      auto it = contributions.find(Value{id, out});
      if (it == contributions.end()) continue;
      ASSIGN_OR_RETURN(output_grads[out], SumContributions(g, node.name, it->second));
      any = true;
    }
    if (!any) continue;
    std::vector<bool> needs(node.inputs.size());
    bool needs_any = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      needs[i] = rel.depends_on_parameter[node.inputs[i].node] &&
                 forward.spec(node.inputs[i]).dtype != DType::kInt32;
      needs_any = needs_any || needs[i];
    }
    if (!needs_any) continue;
    if (node.op->grad == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("op '", node.op_name(), "' node '", node.name, "' has no gradient rule"));
    }
    ASSIGN_OR_RETURN(std::vector<Value> input_grads, node.op->grad(g, node, output_grads, needs));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (needs[i] && input_grads[i].valid())
        contributions[node.inputs[i]].push_back(input_grads[i]);
    }
  }

  for (int32_t id : forward.NodesOf("parameter")) {
    auto it = contributions.find(Value{id, 0});
    if (it == contributions.end()) continue;  // The loss does not depend on it: no update.
    ASSIGN_OR_RETURN(Value grad, SumContributions(g, forward.node(id).name, it->second));
    t.parameters.push_back(id);
    t.gradients[id] = grad;
  }
  return t;
}

absl::Status RunAfterEveryReader(Graph& g, int32_t leaf, int32_t writer) {
  for (const Node& reader : g.nodes()) {
    if (reader.id == writer) continue;
    for (const Value& v : reader.inputs) {
      if (v.node == leaf) {
        RETURN_IF_ERROR(g.AddControlEdge(reader.id, writer));
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const Graph& forward, Value loss,
                                                 const SgdOptions& sgd) {
  return BuildTrainingGraphWith(forward, loss, FromSgd(sgd));
}

absl::StatusOr<TrainingGraph> BuildTrainingGraphWith(const Graph& forward, Value loss,
                                                     const OptimizerOptions& optimizer,
                                                     const LossScaleOptions& scaling,
                                                     const NonFiniteOptions& guard) {
  RETURN_IF_ERROR(ValidateLossScaleOptions(scaling));
  ASSIGN_OR_RETURN(TrainingGraph t, BuildBackward(forward, loss, scaling));
  if (t.parameters.empty()) {
    // A step would run and report a loss while nothing learns: refuse it for every caller.
    const std::vector<int32_t> params = forward.NodesOf("parameter");
    std::vector<std::string> names;
    for (size_t i = 0; i < params.size() && i < 4; ++i)
      names.push_back(forward.node(params[i]).name);
    if (params.size() > 4) names.push_back("...");
    return absl::InvalidArgumentError(
        absl::StrCat("the loss '", forward.node(loss.node).name, "' ",
                     params.empty() ? "has no parameter to train: the graph holds none"
                                    : absl::StrCat("depends on none of the graph's ", params.size(),
                                                   " parameters (", absl::StrJoin(names, ", "),
                                                   "), so a training step would update nothing")));
  }
  Graph& g = t.graph;
  RETURN_IF_ERROR(AddOptimizer(optimizer, scaling, t, guard));
  // The step counter moves on once every random op and optimizer node of this step has read it,
  // unless loss scaling or the non-finite guard skipped the update.
  if (auto counter = g.FindNode(kStepCounter); counter.ok()) {
    std::vector<Value> inputs = {Value{*counter, 0}};
    if (auto check = FindStepCheck(g); check.ok()) inputs.push_back(Value{*check, 0});
    ASSIGN_OR_RETURN(std::vector<Value> none,
                     g.AddOp(ops::AdvanceStepOp(), "rng.advance", std::move(inputs)));
    const int32_t advance = g.num_nodes() - 1;
    RETURN_IF_ERROR(RunAfterEveryReader(g, *counter, advance));
    t.optimizer_nodes.push_back(advance);
  }
  return t;
}

}  // namespace reprise::autodiff
