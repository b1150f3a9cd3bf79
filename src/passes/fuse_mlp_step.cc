#include "src/passes/fuse_mlp_step.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/ops/loss_checks.h"
#include "src/ops/mlp_step.h"
#include "src/ops/ops.h"
#include "src/util/checked_math.h"

namespace reprise::passes {

std::string TooManyMultiplyAdds(absl::string_view whose, int64_t multiply_adds) {
  return absl::StrCat(whose, " forward pass has ",
                      multiply_adds == std::numeric_limits<int64_t>::max()
                          ? "more multiply-adds than int64 counts"
                          : absl::StrCat(multiply_adds, " multiply-adds"),
                      "; library GEMMs win above ", kMlpStepMaxForwardMultiplyAdds);
}

namespace {

bool Flag(const Node& node, const char* key) { return ir::BoolAttrOr(node.attrs, key, false); }

}  // namespace

std::optional<WholeStepUpdates> MatchWholeStepUpdates(const Graph& g, const WholeStepGuard& guard,
                                                      const ir::OpDef& grad_op, std::string* why) {
  const bool guarded = guard.mode != codegen::MlpGuard::kNone;
  WholeStepUpdates out;
  for (const Node& node : g.nodes()) {
    if (ir::IsLeaf(node)) continue;
    if (node.op == &ops::SgdMomentumOp()) {
      // Guarded, each update reads the guard's check (input 6), which the kernel makes itself.
      if (node.inputs.size() != (guarded ? 7u : 6u) || Flag(node, "nesterov") ||
          (guarded && node.inputs[6] != guard.check)) {
        *why = "SGD with Nesterov momentum or gradient clipping";
        return std::nullopt;
      }
      out.sgd_of[node.inputs[0].node] = &node;
    }
    if (node.op == &grad_op) out.grad = &node;
    const bool guard_node = guarded && (node.op == &ops::GradNonfiniteOp() ||
                                        node.op == &ops::LossScaleCheckOp());  // The kernel's own.
    if (node.op->kind == ir::OpKind::kOptimizer && node.op != &ops::SgdMomentumOp() &&
        !guard_node) {
      *why = "an optimizer other than SGD with momentum";
      return std::nullopt;
    }
  }
  return out;
}

bool AppendWholeStepParameters(const Graph& g, const WholeStepUpdates& updates,
                               absl::Span<const MlpChainLayer> layers, std::vector<Value>& inputs,
                               std::string* why) {
  const Node* first_sgd = nullptr;
  for (const MlpChainLayer& layer : layers) {
    for (int32_t p : {layer.weight, layer.bias}) {
      auto it = updates.sgd_of.find(p);
      if (it == updates.sgd_of.end()) {
        *why = absl::StrCat("'", g.node(p).name, "' has no SGD update");
        return false;
      }
      if (first_sgd == nullptr) first_sgd = it->second;
      for (int k = 3; k < 6; ++k) {
        if (it->second->inputs[k] != first_sgd->inputs[k]) {
          *why = "parameters with different hyperparameters";
          return false;
        }
      }
    }
  }
  if (first_sgd == nullptr) {
    *why = "the chain has no layer";
    return false;
  }
  inputs.insert(inputs.end(), first_sgd->inputs.begin() + 3, first_sgd->inputs.begin() + 6);
  for (const MlpChainLayer& layer : layers) {
    inputs.push_back(Value{layer.weight, 0});
    inputs.push_back(Value{layer.bias, 0});
    inputs.push_back(updates.sgd_of.at(layer.weight)->inputs[2]);
    inputs.push_back(updates.sgd_of.at(layer.bias)->inputs[2]);
  }
  return true;
}

std::optional<std::vector<MlpChainLayer>> WalkMlpChain(const Graph& g, Value logits,
                                                       const MlpChainOps& form,
                                                       absl::FunctionRef<bool(Value)> reached_input,
                                                       Value* first, std::string* why) {
  std::vector<MlpChainLayer> layers;
  Value h = logits;
  for (bool last = true;; last = false) {
    const Node* node = &g.node(h.node);
    if (!last) {
      if (node->op != &ops::ReluOp()) break;
      node = &g.node(node->inputs[0].node);
    }
    if (node->op != form.bias_add) {
      if (why != nullptr) *why = absl::StrCat("'", node->name, "' is not ", form.bias_add_name);
      return std::nullopt;
    }
    const Node& mm = g.node(node->inputs[0].node);
    if (mm.op != form.matmul || Flag(mm, "transpose_a") || !Flag(mm, "transpose_b")) {
      if (why != nullptr) *why = absl::StrCat("'", mm.name, "' is not ", form.product_name);
      return std::nullopt;
    }
    const Node& w = g.node(mm.inputs[1].node);
    const Node& b = g.node(node->inputs[1].node);
    if (w.op != &ir::ParameterOp() || b.op != &ir::ParameterOp()) {
      if (why != nullptr) *why = "a layer's weight or bias is not a parameter";
      return std::nullopt;
    }
    layers.push_back({w.id, b.id});
    h = mm.inputs[0];
    if (reached_input(h)) break;
  }
  std::reverse(layers.begin(), layers.end());
  *first = h;
  return layers;
}

std::optional<TensorSpec> WholeStepShadowSpec(codegen::MlpGuard guard,
                                              const std::vector<TensorSpec>& weights,
                                              int64_t models) {
  if (guard == codegen::MlpGuard::kNone || weights.empty()) {
    return std::nullopt;
  }
  const int lead = weights[0].shape.rank() - 2;  // 1 where stacked.
  if (lead < 0) return std::nullopt;
  std::vector<int64_t> widths = {weights[0].shape.dim(lead + 1)};
  for (const TensorSpec& w : weights) {
    if (w.shape.rank() != lead + 2) return std::nullopt;
    widths.push_back(w.shape.dim(lead));
  }
  return TensorSpec{Shape{codegen::MlpStepShadowFloats(widths, models)}, DType::kFloat32};
}

std::optional<WholeStepGuard> MatchWholeStepGuard(const Graph& g, std::string* why) {
  WholeStepGuard guard;
  absl::StatusOr<int32_t> check = g.FindNode(autodiff::kNonFiniteCheck);
  if (!check.ok()) return guard;
  auto fail = [&](std::string reason) -> std::optional<WholeStepGuard> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  const Node& c = g.node(*check);
  guard.mode = Flag(c, "sticky") ? codegen::MlpGuard::kStop : codegen::MlpGuard::kSkip;
  guard.check = Value{c.id, 0};
  absl::StatusOr<int32_t> skipped = g.FindNode(autodiff::kNonFiniteSkippedSteps);
  absl::StatusOr<int32_t> record = g.FindNode(autodiff::kNonFiniteRecord);
  if (!skipped.ok() || !record.ok()) return fail("the non-finite guard has no counters");
  guard.skipped_steps = Value{*skipped, 0};
  guard.record = Value{*record, 0};
  // grad_nonfinite -> the check that counts: the kernel does both.
  if (c.op != &ops::LossScaleCheckOp() || g.node(c.inputs[0].node).op != &ops::GradNonfiniteOp() ||
      !Flag(c, "count") || c.inputs.size() != 3 || c.inputs[1] != guard.skipped_steps ||
      c.inputs[2] != guard.record)
    return fail("the non-finite guard's check is not grad_nonfinite's, counting");
  guard.nodes = 2;
  return guard;
}

std::optional<NodeGroup> MatchMlpTrainStep(Graph& graph, const autodiff::TrainingGraph& training,
                                           absl::Span<const Value> kept,
                                           const codegen::MlpStepTarget& target, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<NodeGroup> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  const Graph& g = training.graph;
  if (g.FindNode(autodiff::kLossScale).ok()) return fail("loss scaling (no unscale-or-skip)");
  const std::optional<WholeStepGuard> guard = MatchWholeStepGuard(g, why);
  if (!guard.has_value()) return std::nullopt;
  const bool guarded = guard->mode != codegen::MlpGuard::kNone;
  const Node& loss = g.node(training.loss.node);
  if (loss.op != &ops::SoftmaxCrossEntropyOp())
    return fail("the loss is not softmax cross-entropy");
  if (loss.attrs.contains(ops::kLossClassesAttr))
    return fail("the loss leaves padding columns out (attribute 'classes')");
  const Value labels = loss.inputs[1];
  if (g.node(labels.node).op != &ir::InputOp()) return fail("the labels are not an input");

  const Value logits = loss.inputs[0];
  Value features;
  const std::optional<std::vector<MlpChainLayer>> chain = WalkMlpChain(
      g, logits, {&ops::MatmulOp(), &ops::BiasAddOp(), "a bias add", "x·Wᵀ"},
      [&](Value h) { return g.node(h.node).op == &ir::InputOp(); }, &features, why);
  if (!chain.has_value()) return std::nullopt;
  const std::vector<MlpChainLayer>& layers = *chain;
  if (g.node(features.node).op != &ir::InputOp() || g.spec(features).shape.rank() != 2)
    return fail("the first layer does not read a rank-2 input");

  // Everything the step keeps must be an output of the fused node.
  for (const Value& v : kept) {
    if (v != training.loss && v != logits) return fail("a fetched value lives inside the step");
  }
  // Every parameter is a layer's, each updated by one sgd_momentum with shared hyperparameters.
  if (training.parameters.size() != 2 * layers.size())
    return fail("the model has parameters outside the layer chain");
  std::string updates_why;
  const std::optional<WholeStepUpdates> updates =
      MatchWholeStepUpdates(g, *guard, ops::SoftmaxCrossEntropyGradOp(), &updates_why);
  if (!updates.has_value()) return fail(updates_why);
  const Node* grad = updates->grad;
  if (grad == nullptr) return fail("no loss gradient");
  std::vector<Value> inputs = {features, labels, grad->inputs[2]};
  if (!AppendWholeStepParameters(g, *updates, layers, inputs, &updates_why)) {
    return fail(updates_why);
  }
  // Autodiff of this chain gives exactly 9L - 1 nodes: 3L - 1 forward, the loss and its
  // gradient, per layer a weight gradient, a bias gradient and two updates, and per hidden layer
  // a data gradient and a ReLU gradient; and the guard's. Anything more is work the fused kernel
  // would not do.
  const int64_t num_layers = static_cast<int64_t>(layers.size());
  int64_t non_leaf = 0;
  for (const Node& node : g.nodes()) non_leaf += ir::IsLeaf(node) ? 0 : 1;
  if (non_leaf != 9 * num_layers - 1 + guard->nodes) {
    return fail(absl::StrCat("the step has ", non_leaf, " nodes; an MLP of ", num_layers,
                             " layers has ", 9 * num_layers - 1 + guard->nodes));
  }
  // The kernel runs its products on CUDA cores, one tile set per phase: it wins while launch
  // latency dominates, not once the products are large (4x1024 at batch 256 runs slower fused).
  int64_t multiply_adds = 0;
  for (const MlpChainLayer& layer : layers) {
    multiply_adds = SaturatingAdd(multiply_adds, g.node(layer.weight).outputs[0].NumElements());
  }
  multiply_adds = SaturatingMul(multiply_adds, g.spec(features).shape.dim(0));
  if (multiply_adds > kMlpStepMaxForwardMultiplyAdds) {
    return fail(TooManyMultiplyAdds("the", multiply_adds));
  }
  std::vector<TensorSpec> specs;
  for (const Value& v : inputs) specs.push_back(g.spec(v));
  specs.push_back({Shape{64}, DType::kInt32});  // The barrier.
  if (guarded) {
    specs.push_back(g.spec(guard->skipped_steps));
    specs.push_back(g.spec(guard->record));
  }
  std::vector<TensorSpec> weights;
  for (const MlpChainLayer& layer : layers) weights.push_back(g.node(layer.weight).outputs[0]);
  const std::optional<TensorSpec> shadow = WholeStepShadowSpec(guard->mode, weights, 1);
  if (shadow.has_value()) specs.push_back(*shadow);
  codegen::MlpStepTarget guarded_target = target;
  guarded_target.guard = guard->mode;
  std::string unsupported;
  if (!ops::MlpTrainStepSupported(specs, guarded_target, &unsupported)) return fail(unsupported);

  auto barrier =
      graph.AddState("mlp_train_step.barrier", {Shape{64}, DType::kInt32}, Initializer::Zeros());
  if (!barrier.ok()) return fail(std::string(barrier.status().message()));
  inputs.push_back(*barrier);
  Attrs attrs = {{"layers", static_cast<int64_t>(layers.size())}};
  if (guarded) {
    inputs.push_back(guard->skipped_steps);
    inputs.push_back(guard->record);
    attrs["non_finite"] = ops::MlpStepGuardName(guard->mode);
  }
  if (shadow.has_value()) {
    auto state = graph.AddState("mlp_train_step.shadow", *shadow, Initializer::Zeros());
    if (!state.ok()) return fail(std::string(state.status().message()));
    inputs.push_back(*state);
  }
  NodeGroup group{.op = &ops::MlpTrainStepOp(),
                  .name = "mlp_train_step",
                  .attrs = std::move(attrs),
                  .inputs = std::move(inputs),
                  .outputs = {training.loss, logits, Value{}}};
  for (const Node& node : g.nodes()) {
    if (!ir::IsLeaf(node)) group.members.push_back(node.id);
  }
  return group;
}

}  // namespace reprise::passes
