// The whole-step match for an ensemble of ReLU MLPs batched by src/passes/batch_ensemble.h:
// the batched form of MatchMlpTrainStep's chain (batched_matmul, batched_bias_add, relu; the
// models' losses summed by model_sum) becomes one batched_mlp_train_step.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/ops/batched.h"
#include "src/ops/mlp_step.h"
#include "src/ops/ops.h"
#include "src/passes/fuse_mlp_step.h"
#include "src/util/checked_math.h"

namespace reprise::passes {
namespace {

// The input a batched op reads: `v` itself, or what a model_tile repeats for every model (counted
// in `tiles`); nullopt unless that is an input.
std::optional<Value> ModelInput(const Graph& g, Value v, int* tiles) {
  if (g.node(v.node).op == &ops::ModelTileOp()) {
    ++*tiles;
    v = g.node(v.node).inputs[0];
  }
  if (g.node(v.node).op != &ir::InputOp()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<NodeGroup> MatchBatchedMlpTrainStep(Graph& graph,
                                                  const autodiff::TrainingGraph& training,
                                                  absl::Span<const Value> kept,
                                                  const codegen::MlpStepTarget& target,
                                                  int64_t max_models, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<NodeGroup> {
    if (why != nullptr) *why = absl::StrCat("ensemble: ", reason);
    return std::nullopt;
  };
  const Graph& g = training.graph;
  if (g.FindNode(autodiff::kLossScale).ok()) return fail("loss scaling (no unscale-or-skip)");
  std::string guard_why;
  const std::optional<WholeStepGuard> guard = MatchWholeStepGuard(g, &guard_why);
  if (!guard.has_value()) return fail(guard_why);
  const bool guarded = guard->mode != codegen::MlpGuard::kNone;
  const Node& total = g.node(training.loss.node);
  if (total.op != &ops::ModelSumOp()) return fail("the loss is not a sum of the models' losses");
  const Node& loss = g.node(total.inputs[0].node);
  if (loss.op != &ops::BatchedSoftmaxCrossEntropyOp())
    return fail("the models' loss is not softmax cross-entropy");
  const int64_t models = g.spec(loss.inputs[0]).shape.dim(0);
  if (models > max_models) {
    return fail(absl::StrCat(models, " models, more than whole_step_max_models = ", max_models,
                             " (the batched per-layer step is faster there)"));
  }
  int tiles = 0;
  const std::optional<Value> labels = ModelInput(g, loss.inputs[1], &tiles);
  if (!labels.has_value()) return fail("the labels are not an input");

  // The forward chain, as MatchMlpTrainStep walks it, in batched ops.
  const Value logits = loss.inputs[0];
  std::optional<Value> features;
  Value first;
  std::string chain_why;
  const std::optional<std::vector<MlpChainLayer>> chain = WalkMlpChain(
      g, logits,
      {&ops::BatchedMatmulOp(), &ops::BatchedBiasAddOp(), "a batched bias add",
       "x·Wᵀ for every model"},
      [&](Value h) { return (features = ModelInput(g, h, &tiles)).has_value(); }, &first,
      &chain_why);
  if (!chain.has_value()) return fail(chain_why);
  if (!features.has_value()) return fail("the first layer does not read an input");
  const std::vector<MlpChainLayer>& layers = *chain;

  for (const Value& v : kept) {
    if (v != training.loss && v != Value{loss.id, 0} && v != logits)
      return fail("a fetched value lives inside the step");
  }
  if (training.parameters.size() != 2 * layers.size())
    return fail("the models have parameters outside the layer chain");
  std::string updates_why;
  const std::optional<WholeStepUpdates> updates =
      MatchWholeStepUpdates(g, *guard, ops::BatchedSoftmaxCrossEntropyGradOp(), &updates_why);
  if (!updates.has_value()) return fail(updates_why);
  const Node* grad = updates->grad;
  if (grad == nullptr || grad->inputs[0] != logits || grad->inputs[1] != loss.inputs[1])
    return fail("no gradient of the models' loss");
  // The sum's gradient reaches every model's loss as model_broadcast(dloss).
  const Node& broadcast = g.node(grad->inputs[2].node);
  if (broadcast.op != &ops::ModelBroadcastOp())
    return fail("the models' loss gradients are not the sum's gradient");
  std::vector<Value> inputs = {*features, *labels, broadcast.inputs[0]};
  if (!AppendWholeStepParameters(g, *updates, layers, inputs, &updates_why)) {
    return fail(updates_why);
  }
  // MatchMlpTrainStep's 9L - 1 nodes, with the batched loss: model_sum and model_broadcast, a
  // model_tile for each input every model shares, and the guard's.
  const int64_t num_layers = static_cast<int64_t>(layers.size());
  int64_t non_leaf = 0;
  for (const Node& node : g.nodes()) non_leaf += ir::IsLeaf(node) ? 0 : 1;
  const int64_t expected = 9 * num_layers + 1 + tiles + guard->nodes;
  if (non_leaf != expected) {
    return fail(absl::StrCat("the step has ", non_leaf, " nodes; an ensemble of MLPs of ",
                             num_layers, " layers has ", expected));
  }
  // Each model's products against the single MLP's limit: the kernel's tiles are per model.
  const TensorSpec& x = g.spec(*features);
  int64_t multiply_adds = 0;
  for (const MlpChainLayer& layer : layers) {
    const Shape& w = g.node(layer.weight).outputs[0].shape;
    multiply_adds = SaturatingAdd(multiply_adds, SaturatingMul(w.dim(1), w.dim(2)));
  }
  multiply_adds = SaturatingMul(multiply_adds, x.shape.dim(x.shape.rank() - 2));
  if (multiply_adds > kMlpStepMaxForwardMultiplyAdds) {
    return fail(TooManyMultiplyAdds("each model's", multiply_adds));
  }
  std::vector<TensorSpec> specs;
  for (const Value& v : inputs) specs.push_back(g.spec(v));
  specs.push_back({Shape{codegen::kMlpStepBarrierWords}, DType::kInt32});
  if (guarded) {
    specs.push_back(g.spec(guard->skipped_steps));
    specs.push_back(g.spec(guard->record));
  }
  std::vector<TensorSpec> weights;
  for (const MlpChainLayer& layer : layers) weights.push_back(g.node(layer.weight).outputs[0]);
  const std::optional<TensorSpec> shadow = WholeStepShadowSpec(guard->mode, weights, models);
  if (shadow.has_value()) specs.push_back(*shadow);
  codegen::MlpStepTarget guarded_target = target;
  guarded_target.guard = guard->mode;
  if (absl::Status s = ops::CheckBatchedMlpTrainStepSupported(specs, guarded_target); !s.ok())
    return fail(std::string(s.message()));

  auto barrier =
      graph.AddState("batched_mlp_train_step.barrier",
                     {Shape{codegen::kMlpStepBarrierWords}, DType::kInt32}, Initializer::Zeros());
  if (!barrier.ok()) return fail(std::string(barrier.status().message()));
  inputs.push_back(*barrier);
  Attrs attrs = {{"layers", num_layers}};
  if (guarded) {
    inputs.push_back(guard->skipped_steps);
    inputs.push_back(guard->record);
    attrs["non_finite"] = ops::MlpStepGuardName(guard->mode);
  }
  if (shadow.has_value()) {
    auto state = graph.AddState("batched_mlp_train_step.shadow", *shadow, Initializer::Zeros());
    if (!state.ok()) return fail(std::string(state.status().message()));
    inputs.push_back(*state);
  }
  NodeGroup group{.op = &ops::BatchedMlpTrainStepOp(),
                  .name = "batched_mlp_train_step",
                  .attrs = std::move(attrs),
                  .inputs = std::move(inputs),
                  .outputs = {training.loss, Value{loss.id, 0}, logits, Value{}}};
  for (const Node& node : g.nodes()) {
    if (!ir::IsLeaf(node)) group.members.push_back(node.id);
  }
  return group;
}

}  // namespace reprise::passes
