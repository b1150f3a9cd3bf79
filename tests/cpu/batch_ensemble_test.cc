// Ensemble batching on the CPU reference: the batched graph computes each model's loss and
// gradients as the unbatched graph does, bit for bit in float32 (every batched op keeps the
// unbatched op's arithmetic and order per model); branches that differ are left alone; the
// per-model names of the stacked tensors.
#include "src/passes/batch_ensemble.h"

#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/passes/plan.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const models::MlpConfig kSmall = {
    .batch = 5, .input_features = 6, .depth = 2, .width = 7, .classes = 3};

// Slice `model` of a stacked tensor, or the whole tensor for model -1.
std::vector<float> SliceOf(const ir::HostTensor& t, int64_t model) {
  auto data = t.data<float>();
  if (model < 0) return {data.begin(), data.end()};
  const int64_t per_model = t.size() / t.spec().shape.dim(0);
  return {data.begin() + model * per_model, data.begin() + (model + 1) * per_model};
}

// Runs one backward pass of `graph` unbatched and batched on the CPU reference in float32 from
// the same weights and inputs, and checks every model's loss and every gradient bit for bit, and
// the total within rounding.
void ExpectSameLossesAndGradients(const Graph& graph, Value loss, absl::Span<const Value> losses,
                                  const passes::BatchedGraph& batched) {
  constexpr uint64_t kSeed = 42;
  auto unbatched_training = autodiff::BuildBackward(graph, loss);
  ASSERT_TRUE(unbatched_training.ok()) << unbatched_training.status();
  auto batched_training = autodiff::BuildBackward(batched.graph, batched.loss);
  ASSERT_TRUE(batched_training.ok()) << batched_training.status();
  ir::ReferenceExecutor unbatched(unbatched_training->graph, false, kSeed);
  ir::ReferenceExecutor stacked(batched_training->graph, false, kSeed);

  // Fresh inputs for the unbatched graph; every leaf of the batched graph is then filled from the
  // unbatched graph's leaves, after checking that the stacked initial values are those leaves.
  std::mt19937 rng(7);
  for (int32_t id : graph.NodesOf("input")) {
    const Node& node = graph.node(id);
    if (node.outputs[0].dtype == DType::kInt32) {
      const int64_t classes = kSmall.classes;
      std::vector<int32_t> labels(node.outputs[0].NumElements());
      for (int32_t& l : labels) l = static_cast<int32_t>(rng() % classes);
      ASSERT_TRUE(unbatched.SetLeaf(node.name, labels).ok());
    } else {
      std::uniform_real_distribution<double> u(-1, 1);
      std::vector<double> x(node.outputs[0].NumElements());
      for (double& v : x) v = u(rng);
      ASSERT_TRUE(unbatched.SetLeaf(node.name, x).ok());
    }
  }
  for (const passes::StackedLeaf& leaf : batched.stacked) {
    ir::HostTensor* target = *stacked.Leaf(leaf.name);
    const ir::HostTensor initial = passes::InitialStackedValue(leaf, target->spec(), kSeed);
    const int64_t slice_bytes = target->spec().bytes() / static_cast<int64_t>(leaf.members.size());
    for (size_t k = 0; k < leaf.members.size(); ++k) {
      const ir::HostTensor* member = *unbatched.Leaf(leaf.members[k].name);
      ASSERT_EQ(member->spec().bytes(), slice_bytes) << leaf.members[k].name;
      const int32_t id = *graph.FindNode(leaf.members[k].name);
      if (graph.node(id).op != &ir::InputOp()) {
        EXPECT_EQ(std::memcmp(static_cast<const char*>(initial.raw()) + k * slice_bytes,
                              member->raw(), slice_bytes),
                  0)
            << "initial value of " << leaf.members[k].name;
      }
      std::memcpy(static_cast<char*>(target->raw()) + k * slice_bytes, member->raw(), slice_bytes);
    }
  }
  for (const Node& node : graph.nodes()) {  // Leaves left unbatched keep their own names.
    if (!ir::IsLeaf(node) || batched.Map(Value{node.id, 0})->model >= 0) continue;
    const ir::HostTensor* from = *unbatched.Leaf(node.name);
    ir::HostTensor* to = *stacked.Leaf(node.name);
    ASSERT_EQ(from->spec(), to->spec()) << node.name;
    std::memcpy(to->raw(), from->raw(), from->spec().bytes());
  }
  ASSERT_TRUE(unbatched.Run().ok());
  ASSERT_TRUE(stacked.Run().ok());

  auto expect_same = [&](Value old_value, Value new_whole, int64_t model, const std::string& what) {
    const std::vector<float> want = SliceOf(**unbatched.Tensor(old_value), -1);
    const std::vector<float> got = SliceOf(**stacked.Tensor(new_whole), model);
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << what << " [" << i << "]";
  };
  for (size_t k = 0; k < losses.size(); ++k) {
    const passes::ModelValue mapped = *batched.Map(losses[k]);
    expect_same(losses[k], mapped.value, mapped.model, absl::StrCat("loss of model ", k));
  }
  // The total may add the models' losses in another order than the user's sum did.
  EXPECT_FLOAT_EQ(SliceOf(**unbatched.Tensor(loss), -1)[0],
                  SliceOf(**stacked.Tensor(batched.loss), -1)[0]);
  int checked = 0;
  for (int32_t param : unbatched_training->parameters) {
    const passes::ModelValue mapped = *batched.Map(Value{param, 0});
    const Value grad = batched_training->gradients.at(mapped.value.node);
    expect_same(unbatched_training->gradients.at(param), grad, mapped.model,
                absl::StrCat("gradient of ", graph.node(param).name));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(graph.NodesOf("parameter").size()));
}

TEST(BatchEnsembleTest, MlpEnsembleBecomesOneBatchedModel) {
  auto ensemble = models::BuildMlpEnsemble(4, kSmall);
  ASSERT_TRUE(ensemble.ok()) << ensemble.status();
  auto batched = passes::BatchEnsembles(ensemble->graph, ensemble->loss, ensemble->losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->groups.size(), 1u);
  EXPECT_EQ(batched->groups[0].models, 4);
  EXPECT_THAT(batched->groups[0].roots, ElementsAre("m0.loss", "m1.loss", "m2.loss", "m3.loss"));
  // Three layers of weight and bias, features and labels: each stacked once.
  EXPECT_EQ(batched->graph.NodesOf("parameter").size(), 6u);
  EXPECT_EQ(batched->graph.NodesOf("input").size(), 2u);
  const int32_t w = *batched->graph.FindNode("m*.fc1.weight");
  EXPECT_EQ(batched->graph.node(w).outputs[0].shape, (Shape{4, 7, 7}));
  EXPECT_EQ(batched->graph.spec(Value{*batched->graph.FindNode("m*.features"), 0}).shape,
            (Shape{4, 5, 6}));
  // One node per layer op for all four models, and the total a model_sum named as before.
  int matmuls = 0;
  for (const Node& node : batched->graph.nodes()) {
    matmuls += node.op_name() == "batched_matmul";
    EXPECT_NE(node.op_name(), "matmul") << node.name;
  }
  EXPECT_EQ(matmuls, 3);
  EXPECT_EQ(batched->graph.node(batched->loss.node).op_name(), "model_sum");
  EXPECT_EQ(batched->graph.node(batched->loss.node).name, "loss");
  ExpectSameLossesAndGradients(ensemble->graph, ensemble->loss, ensemble->losses, *batched);
}

// Models built one by one under names of the user's choosing, summed in an order of theirs.
TEST(BatchEnsembleTest, SeparatelyBuiltModelsAreFoundByStructure) {
  Graph g;
  std::vector<Value> losses;
  for (const char* prefix : {"alpha.", "beta.", "gamma."}) {
    auto mlp = models::AddMlp(g, kSmall, prefix);
    ASSERT_TRUE(mlp.ok()) << mlp.status();
    losses.push_back(mlp->loss);
  }
  Value partial = *nn::Add(g, losses[2], losses[0], "partial");
  Value total = *nn::Add(g, partial, losses[1], "total");
  auto batched = passes::BatchEnsembles(g, total, losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->groups.size(), 1u);
  EXPECT_EQ(batched->groups[0].models, 3);
  EXPECT_FALSE(batched->graph.FindNode("partial").ok()) << "the sum's inner add is folded";
  EXPECT_EQ(batched->graph.node(batched->loss.node).name, "total");
  EXPECT_THAT(batched->Map(partial).status().message(), HasSubstr("model_sum"));
  ExpectSameLossesAndGradients(g, total, losses, *batched);
}

// Model 2 is wider: models 0, 1 and 3 batch, model 2 stays as it was and joins the total.
TEST(BatchEnsembleTest, MismatchedModelIsLeftAlone) {
  Graph g;
  auto losses = models::Ensemble(g, 4, [](Graph& graph, absl::string_view prefix, int k) {
    models::MlpConfig config = kSmall;
    if (k == 2) config.width = 9;
    return models::AddMlp(graph, config, prefix).value().loss;
  });
  ASSERT_TRUE(losses.ok()) << losses.status();
  Value total = *models::SumLosses(g, *losses);
  auto batched = passes::BatchEnsembles(g, total, *losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->groups.size(), 1u);
  EXPECT_THAT(batched->groups[0].roots, ElementsAre("m0.loss", "m1.loss", "m3.loss"));
  const int32_t odd = *batched->graph.FindNode("m2.fc0.weight");
  EXPECT_EQ(batched->graph.node(odd).outputs[0].shape, (Shape{9, 6}));
  EXPECT_EQ(batched->Map(Value{*g.FindNode("m2.fc0.weight"), 0})->model, -1);
  EXPECT_EQ(batched->Map(Value{*g.FindNode("m3.fc0.weight"), 0})->model, 2);
  ExpectSameLossesAndGradients(g, total, *losses, *batched);
}

// A deep ensemble: every model reads the same batch. The shared inputs stay as they are and each
// batched op reads them tiled per model.
TEST(BatchEnsembleTest, ModelsSharingTheirInputsBatch) {
  Graph g;
  const Value x = *g.AddInput("features", {Shape{kSmall.batch, kSmall.input_features}});
  const Value y = *g.AddInput("labels", {Shape{kSmall.batch}, DType::kInt32});
  auto losses = models::Ensemble(g, 3, [&](Graph& graph, absl::string_view prefix, int) {
    Value h = *nn::Relu(graph, *nn::Linear(graph, x, kSmall.width, absl::StrCat(prefix, "fc0")));
    Value logits = *nn::Linear(graph, h, kSmall.classes, absl::StrCat(prefix, "fc1"));
    return nn::SoftmaxCrossEntropy(graph, logits, y, absl::StrCat(prefix, "loss"));
  });
  ASSERT_TRUE(losses.ok()) << losses.status();
  Value total = *models::SumLosses(g, *losses);
  auto batched = passes::BatchEnsembles(g, total, *losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->groups.size(), 1u);
  EXPECT_EQ(batched->groups[0].models, 3);
  const Graph& b = batched->graph;
  EXPECT_EQ(b.spec(Value{*b.FindNode("features"), 0}).shape,
            (Shape{kSmall.batch, kSmall.input_features}));
  EXPECT_EQ(b.node(*b.FindNode("labels.tiled")).op_name(), "model_tile");
  EXPECT_EQ(batched->Map(x)->model, -1);
  ExpectSameLossesAndGradients(g, total, *losses, *batched);
}

// Models 0 and 1 share one batch, 2 and 3 another: no consistent stacking, so nothing batches.
TEST(BatchEnsembleTest, PartlySharedInputsAreLeftAlone) {
  Graph g;
  std::vector<Value> xs = {*g.AddInput("x01", {Shape{kSmall.batch, kSmall.input_features}}),
                           *g.AddInput("x23", {Shape{kSmall.batch, kSmall.input_features}})};
  const Value y = *g.AddInput("labels", {Shape{kSmall.batch}, DType::kInt32});
  auto losses = models::Ensemble(g, 4, [&](Graph& graph, absl::string_view prefix, int k) {
    Value logits = *nn::Linear(graph, xs[k / 2], kSmall.classes, absl::StrCat(prefix, "fc0"));
    return nn::SoftmaxCrossEntropy(graph, logits, y, absl::StrCat(prefix, "loss"));
  });
  ASSERT_TRUE(losses.ok());
  Value total = *models::SumLosses(g, *losses);
  auto batched = passes::BatchEnsembles(g, total, *losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_TRUE(batched->groups.empty());
  EXPECT_THAT(batched->declined,
              ::testing::Contains(HasSubstr("some models share 'x01' and others do not")));
}

TEST(BatchEnsembleTest, ModelReadOutsideItsBranchIsLeftAloneWithAReason) {
  auto ensemble = models::BuildMlpEnsemble(4, kSmall);
  ASSERT_TRUE(ensemble.ok());
  Graph& g = ensemble->graph;
  ASSERT_TRUE(nn::Relu(g, Value{*g.FindNode("m0.fc0.relu"), 0}, "spy").ok());
  auto batched = passes::BatchEnsembles(g, ensemble->loss, ensemble->losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->groups.size(), 1u);
  EXPECT_THAT(batched->groups[0].roots, ElementsAre("m1.loss", "m2.loss", "m3.loss"));
  EXPECT_THAT(batched->declined,
              ::testing::Contains(HasSubstr("'m0.fc0.relu' is also read by 'spy'")));
  ExpectSameLossesAndGradients(g, ensemble->loss, ensemble->losses, *batched);
}

TEST(BatchEnsembleTest, GroupsBelowTheThresholdAndLoneModelsStayUnbatched) {
  auto ensemble = models::BuildMlpEnsemble(3, kSmall);
  ASSERT_TRUE(ensemble.ok());
  auto kept = passes::BatchEnsembles(ensemble->graph, ensemble->loss, {}, {.min_models = 4});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->groups.empty());
  EXPECT_EQ(kept->graph.num_nodes(), ensemble->graph.num_nodes());

  auto mlp = models::BuildMlp(kSmall);
  ASSERT_TRUE(mlp.ok());
  auto lone = passes::BatchEnsembles(mlp->graph, mlp->loss, {});
  ASSERT_TRUE(lone.ok());
  EXPECT_TRUE(lone->groups.empty());
  EXPECT_EQ(lone->Map(mlp->logits)->value, mlp->logits);
}

// Single models are never mistaken for ensembles, whatever repeats inside them.
TEST(BatchEnsembleTest, ResNetHasNothingToBatch) {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .classes = 4, .image_size = 32});
  ASSERT_TRUE(net.ok());
  auto batched = passes::BatchEnsembles(net->graph, net->loss, {});
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_TRUE(batched->groups.empty());
  EXPECT_EQ(batched->graph.num_nodes(), net->graph.num_nodes());
}

// Dropout draws from the graph's one step counter, which no two models may share as their own:
// such models stay unbatched (and train as before).
TEST(BatchEnsembleTest, ModelsWithDropoutStayUnbatched) {
  Graph g;
  auto losses = models::Ensemble(g, 3, [](Graph& graph, absl::string_view prefix, int) {
    const std::string p(prefix);
    Value x = *graph.AddInput(p + "features", {Shape{kSmall.batch, kSmall.input_features}});
    Value y = *graph.AddInput(p + "labels", {Shape{kSmall.batch}, DType::kInt32});
    Value h = *nn::Dropout(graph, *nn::Linear(graph, x, kSmall.width, p + "fc0"), 0.5, p + "drop");
    return nn::SoftmaxCrossEntropy(graph, *nn::Linear(graph, h, kSmall.classes, p + "fc1"), y,
                                   p + "loss");
  });
  ASSERT_TRUE(losses.ok()) << losses.status();
  Value total = *models::SumLosses(g, *losses);
  auto batched = passes::BatchEnsembles(g, total, *losses);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_TRUE(batched->groups.empty());
}

// A model's parameters and optimizer state answer to their own names, as slices.
TEST(BatchEnsembleTest, PerModelNamesOfStackedWeightsAndOptimizerState) {
  auto ensemble = models::BuildMlpEnsemble(4, kSmall);
  ASSERT_TRUE(ensemble.ok());
  auto batched = passes::BatchEnsembles(ensemble->graph, ensemble->loss, ensemble->losses);
  ASSERT_TRUE(batched.ok());
  auto training = autodiff::BuildTrainingGraph(batched->graph, batched->loss, SgdOptions{});
  ASSERT_TRUE(training.ok()) << training.status();
  const std::vector<passes::ModelTensor> names =
      passes::ModelTensorNames(training->graph, *batched);
  auto find = [&](const std::string& name) -> const passes::ModelTensor* {
    for (const passes::ModelTensor& t : names) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  ASSERT_NE(find("m3.fc1.weight"), nullptr);
  EXPECT_EQ(find("m3.fc1.weight")->stacked, "m*.fc1.weight");
  EXPECT_EQ(find("m3.fc1.weight")->model, 3);
  ASSERT_NE(find("m0.fc2.bias.momentum"), nullptr);
  EXPECT_EQ(find("m0.fc2.bias.momentum")->stacked, "m*.fc2.bias.momentum");
  EXPECT_EQ(find("m0.fc2.bias.momentum")->model, 0);
  EXPECT_EQ(find("m4.fc0.weight"), nullptr);
  ASSERT_NE(find("m2.labels"), nullptr);
  EXPECT_EQ(find("m2.labels")->stacked, "m*.labels");
  // Two inputs, six parameters and six momenta, four models each.
  EXPECT_EQ(names.size(), 56u);
}

// The batched training graph goes through the rest of the pipeline: fusion, schedule, memory.
TEST(BatchEnsembleTest, BatchedTrainingGraphPlans) {
  auto ensemble = models::BuildMlpEnsemble(
      4, {.batch = 64, .input_features = 64, .depth = 2, .width = 256, .classes = 10});
  ASSERT_TRUE(ensemble.ok());
  auto batched = passes::BatchEnsembles(ensemble->graph, ensemble->loss, ensemble->losses);
  ASSERT_TRUE(batched.ok());
  auto training = autodiff::BuildTrainingGraph(batched->graph, batched->loss, SgdOptions{});
  ASSERT_TRUE(training.ok()) << training.status();
  // By default four models' whole step is one launch (src/ops/mlp_step.h, batched_mlp_train_step).
  auto whole = passes::BuildPlan(*training, batched->kept, {.lanes = 2});
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->launches.size(), 1u) << passes::PlanToString(*whole);
  EXPECT_EQ(whole->graph().node(whole->launches[0].node).op_name(), "batched_mlp_train_step");
  // The per-layer batched step:
  passes::PlanOptions per_layer{.lanes = 2};
  per_layer.fusion.whole_mlp_step = false;
  auto plan = passes::BuildPlan(*std::move(training), batched->kept, per_layer);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int matmul_launches = 0, fused_layers = 0;
  for (const Node& node : plan->graph().nodes()) {
    EXPECT_NE(node.op_name(), "matmul") << node.name;
    matmul_launches += node.op->kind == ir::OpKind::kMatmul;
    fused_layers += node.op_name() == "batched_matmul_bias";
  }
  // Forward 3, weight gradients 3, data gradients 2: the same count as one model's.
  EXPECT_EQ(matmul_launches, 8);
  EXPECT_EQ(fused_layers, 3) << "each layer's bias (and ReLU) in its GEMM's epilogue";
  // Compute launches (the input copy comes first, apart): 3 layers, the loss with its sum and
  // gradient, the last bias gradient, 2 fused ReLU-and-bias gradients, 5 gradient GEMMs, one
  // optimizer launch.
  EXPECT_EQ(plan->launches.size(), 13u) << passes::PlanToString(*plan);
}

// The fused batched step computes what the unfused one does, bit for bit on the CPU reference:
// each fused op's reference is its parts' references in sequence.
TEST(BatchEnsembleTest, FusedBatchedStepEqualsUnfusedOnTheReference) {
  auto ensemble = models::BuildMlpEnsemble(3, kSmall);
  ASSERT_TRUE(ensemble.ok());
  auto batched = passes::BatchEnsembles(ensemble->graph, ensemble->loss, ensemble->losses);
  ASSERT_TRUE(batched.ok());
  auto unfused = autodiff::BuildTrainingGraph(batched->graph, batched->loss, SgdOptions{});
  auto training = autodiff::BuildTrainingGraph(batched->graph, batched->loss, SgdOptions{});
  ASSERT_TRUE(unfused.ok() && training.ok());
  passes::PlanOptions per_layer;  // The whole-step kernel has its own test.
  per_layer.fusion.whole_mlp_step = false;
  auto plan = passes::BuildPlan(*std::move(training), batched->kept, per_layer);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> fused_ops;
  for (const Node& node : plan->graph().nodes()) {
    if (absl::StartsWith(node.op_name(), "batched_") && !ir::IsLeaf(node)) {
      fused_ops.push_back(std::string(node.op_name()));
    }
  }
  EXPECT_THAT(fused_ops, ::testing::IsSupersetOf({"batched_matmul_bias",
                                                  "batched_softmax_cross_entropy_with_grad",
                                                  "batched_relu_grad_bias_grad"}));
  ir::ReferenceExecutor want(unfused->graph, false, 3);
  ir::ReferenceExecutor got(plan->graph(), false, 3);
  std::mt19937 rng(9);
  for (int32_t id : unfused->graph.NodesOf("input")) {
    const Node& node = unfused->graph.node(id);
    if (node.outputs[0].dtype == DType::kInt32) {
      std::vector<int32_t> labels(node.outputs[0].NumElements());
      for (int32_t& l : labels) l = static_cast<int32_t>(rng() % kSmall.classes);
      ASSERT_TRUE(want.SetLeaf(node.name, labels).ok());
      ASSERT_TRUE(got.SetLeaf(node.name, labels).ok());
    } else if (node.outputs[0].shape.rank() > 0) {
      std::vector<double> x(node.outputs[0].NumElements());
      for (double& v : x) v = std::uniform_real_distribution<double>(-1, 1)(rng);
      ASSERT_TRUE(want.SetLeaf(node.name, x).ok());
      ASSERT_TRUE(got.SetLeaf(node.name, x).ok());
    }
  }
  ASSERT_TRUE(want.Run().ok());
  ASSERT_TRUE(got.Run().ok());
  EXPECT_EQ(SliceOf(**want.Tensor(unfused->loss), -1),
            SliceOf(**got.Tensor(plan->training.loss), -1));
  for (int32_t id : unfused->graph.NodesOf("parameter")) {
    const std::string& name = unfused->graph.node(id).name;
    EXPECT_EQ(SliceOf(**want.Leaf(name), -1), SliceOf(**got.Leaf(name), -1)) << name;
  }
}

TEST(BatchEnsembleTest, RefusesValuesNotInTheGraph) {
  auto ensemble = models::BuildMlpEnsemble(2, kSmall);
  ASSERT_TRUE(ensemble.ok());
  EXPECT_EQ(passes::BatchEnsembles(ensemble->graph, Value{9999, 0}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(passes::BatchEnsembles(ensemble->graph, ensemble->loss, {Value{-1, 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BatchEnsembleTest, AnUnknownValueOfAnUnbatchedGraphIsNotCalledASummedLoss) {
  const auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  ASSERT_TRUE(mlp.ok());
  const auto batched = passes::BatchEnsembles(mlp->graph, mlp->loss, {});
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_TRUE(batched->groups.empty());
  const auto mapped = batched->Map(Value{9999, 0});
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mapped.status().message(),
              ::testing::AllOf(::testing::HasSubstr("node 9999"),
                               ::testing::HasSubstr("not a value of the graph"),
                               ::testing::Not(::testing::HasSubstr("model_sum"))));
}

}  // namespace
}  // namespace reprise
