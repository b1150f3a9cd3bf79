// batched_mlp_train_step and its match without a GPU: an ensemble of MLPs batched by
// batch_ensemble becomes one whole-step node (own or shared inputs), only where valid (the reason
// is given otherwise); its CPU reference gives the per-layer batched step's bits and, model by
// model, the bits of the unbatched models; bad inputs are named.
#include <cstring>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/mlp_step.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/fuse.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

const SgdOptions kSgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};

models::MlpConfig Config(int64_t batch, int64_t features, int64_t depth, int64_t width,
                         int64_t classes) {
  return {.batch = batch,
          .input_features = features,
          .depth = depth,
          .width = width,
          .classes = classes};
}

// K models summed into one loss; `shared`: every model reads the same features and labels (a deep
// ensemble), else each its own ("m<k>.features", "m<k>.labels", as BuildMlpEnsemble names them).
struct Ensemble {
  Graph graph;
  Value loss;
  std::vector<Value> losses, logits;
};

Ensemble BuildEnsemble(int models, const models::MlpConfig& c, bool shared) {
  if (!shared) {
    models::MlpEnsemble e = *models::BuildMlpEnsemble(models, c);
    return {std::move(e.graph), e.loss, std::move(e.losses), std::move(e.logits)};
  }
  Ensemble e;
  Graph& g = e.graph;
  const Value x = *g.AddInput("features", {Shape{c.batch, c.input_features}});
  const Value y = *g.AddInput("labels", {Shape{c.batch}, DType::kInt32});
  e.losses = *models::Ensemble(g, models, [&](Graph& graph, absl::string_view prefix, int) {
    Value h = x;
    for (int64_t l = 0; l < c.depth; ++l) {
      h = *nn::Relu(graph, *nn::Linear(graph, h, c.width, absl::StrCat(prefix, "fc", l)));
    }
    const Value logits = *nn::Linear(graph, h, c.classes, absl::StrCat(prefix, "fc", c.depth));
    e.logits.push_back(logits);
    return nn::SoftmaxCrossEntropy(graph, logits, y, absl::StrCat(prefix, "loss"));
  });
  e.loss = *models::SumLosses(g, e.losses);
  return e;
}

struct BatchedTraining {
  passes::BatchedGraph batched;
  autodiff::TrainingGraph training;
};

BatchedTraining Batch(const Ensemble& e,
                      const OptimizerOptions& optimizer = autodiff::FromSgd(kSgd)) {
  BatchedTraining t{*passes::BatchEnsembles(e.graph, e.loss, e.losses), {}};
  t.training = *autodiff::BuildTrainingGraphWith(t.batched.graph, t.batched.loss, optimizer);
  return t;
}

std::vector<Value> Kept(const BatchedTraining& t) {
  std::vector<Value> kept = {t.training.loss};
  kept.insert(kept.end(), t.batched.kept.begin(), t.batched.kept.end());
  return kept;
}

// The whole step at any number of models, whether or not it pays (FuseOptions's default stops at
// 4 models, where it was measured faster).
passes::FuseOptions AnyEnsemble() {
  passes::FuseOptions options;
  options.whole_step_max_models = 1 << 20;
  return options;
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

// By default an ensemble of more than four models keeps the batched per-layer step, which measured
// faster from 32 models on an H100, and the plan says why.
TEST(BatchedMlpStepTest, LargeEnsemblesKeepThePerLayerStepByDefault) {
  const Ensemble e = BuildEnsemble(5, Config(8, 12, 2, 16, 5), false);
  const BatchedTraining t = Batch(e);
  auto fused = passes::Fuse(t.training, Kept(t), {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(OpCounts(fused->training.graph).count("batched_mlp_train_step"), 0u);
  EXPECT_THAT(fused->whole_step_declined, HasSubstr("5 models, more than whole_step_max_models"));
}

TEST(BatchedMlpStepTest, EnsembleBecomesOneWholeStepNode) {
  for (const bool shared : {false, true}) {
    const Ensemble e = BuildEnsemble(3, Config(8, 12, 2, 16, 5), shared);
    const BatchedTraining t = Batch(e);
    auto fused = passes::Fuse(t.training, Kept(t), AnyEnsemble());
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(OpCounts(fused->training.graph),
              (std::map<std::string, int>{{"batched_mlp_train_step", 1}}))
        << (shared ? "shared inputs" : "own inputs");
    EXPECT_TRUE(fused->whole_step_declined.empty()) << fused->whole_step_declined;
    const Graph& g = fused->training.graph;
    EXPECT_TRUE(g.FindNode("batched_mlp_train_step.barrier").ok());
    const Node& node = g.node(*g.FindNode("batched_mlp_train_step"));
    EXPECT_EQ(g.spec(node.inputs[0]).shape.rank(), shared ? 2 : 3);  // Shared: not tiled.
    EXPECT_EQ(node.outputs[1].ToString(), "f32[3]");                 // Each model's loss.
    EXPECT_EQ(node.outputs[2].ToString(), "f32[3, 8, 5]");           // The logits.
    for (const Value& v : Kept(t)) EXPECT_TRUE(fused->values.contains(v));
  }
}

TEST(BatchedMlpStepTest, WholeStepOffLeavesTheBatchedPerLayerStep) {
  const BatchedTraining t = Batch(BuildEnsemble(3, Config(8, 12, 2, 16, 5), false));
  passes::FuseOptions options = AnyEnsemble();
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(t.training, Kept(t), options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.count("batched_mlp_train_step"), 0u);
  EXPECT_EQ(counts.at("batched_matmul_bias"), 3);
}

// Declined with the reason, leaving the batched per-layer step.
std::string Declined(const BatchedTraining& t, std::vector<Value> kept) {
  auto fused = passes::Fuse(t.training, kept, AnyEnsemble());
  EXPECT_TRUE(fused.ok()) << fused.status();
  if (!fused.ok()) return "";
  EXPECT_EQ(OpCounts(fused->training.graph).count("batched_mlp_train_step"), 0u);
  EXPECT_GT(OpCounts(fused->training.graph).count("batched_matmul_bias"), 0u);
  return fused->whole_step_declined;
}

TEST(BatchedMlpStepTest, DeclinedWhereTheKernelDoesNotApply) {
  const Ensemble e = BuildEnsemble(2, Config(8, 12, 2, 16, 5), false);
  {  // A fetched hidden activation lives inside the step.
    const BatchedTraining t = Batch(e);
    std::vector<Value> kept = Kept(t);
    kept.push_back(Value{*t.training.graph.FindNode("m*.fc0.relu"), 0});
    EXPECT_THAT(Declined(t, kept), HasSubstr("ensemble: a fetched value lives inside the step"));
  }
  {  // Adam.
    OptimizerOptions adam;
    adam.kind = OptimizerKind::kAdam;
    const BatchedTraining t = Batch(e, adam);
    EXPECT_THAT(Declined(t, Kept(t)), HasSubstr("optimizer other than SGD with momentum"));
  }
  {  // Loss scaling: the kernel has no unscale-or-skip.
    BatchedTraining t{*passes::BatchEnsembles(e.graph, e.loss, e.losses), {}};
    t.training = *autodiff::BuildTrainingGraphWith(
        t.batched.graph, t.batched.loss, autodiff::FromSgd(kSgd), {.mode = LossScaling::kStatic});
    EXPECT_THAT(Declined(t, Kept(t)), HasSubstr("loss scaling"));
  }
  {  // Each model too large: library GEMMs win.
    const BatchedTraining t = Batch(BuildEnsemble(2, Config(256, 1024, 4, 1024, 10), false));
    EXPECT_THAT(Declined(t, Kept(t)), HasSubstr("multiply-adds"));
  }
  {  // The last layer does not fit in a block's shared memory.
    const BatchedTraining t = Batch(BuildEnsemble(2, Config(8, 64, 1, 1024, 1000), false));
    EXPECT_THAT(Declined(t, Kept(t)), HasSubstr("1000 classes"));
  }
}

TEST(BatchedMlpStepTest, InvalidInputsAreNamed) {
  const BatchedTraining t = Batch(BuildEnsemble(3, Config(4, 3, 1, 5, 2), false));
  auto fused = passes::Fuse(t.training, Kept(t), AnyEnsemble());
  ASSERT_TRUE(fused.ok()) << fused.status();
  Graph g = fused->training.graph;
  const Node node = g.node(*g.FindNode("batched_mlp_train_step"));
  auto add_with = [&](int index, TensorSpec spec) {
    std::vector<Value> in = node.inputs;
    static int replacements = 0;
    const std::string name = absl::StrCat("replacement", replacements++);
    in[index] = spec.dtype == DType::kInt32 ? *g.AddState(name, spec, Initializer::Zeros())
                                            : *g.AddParameter(name, spec, Initializer::Zeros());
    return g.AddOp(ops::BatchedMlpTrainStepOp(), "step2", in, node.attrs).status();
  };
  // Layer 1: W_1 is [3, 2, 5].
  EXPECT_THAT(add_with(10, {Shape{2, 2, 5}}).message(),
              AllOf(HasSubstr("step2"), HasSubstr("input 10 (W_1) must be f32 [3, out, 5]")));
  EXPECT_THAT(add_with(11, {Shape{3, 3}}).message(), HasSubstr("input 11 (b_1) must be f32[3, 2]"));
  EXPECT_THAT(add_with(0, {Shape{2, 4, 3}}).message(), HasSubstr("input 0 (features)"));
  EXPECT_THAT(add_with(1, {Shape{3, 5}, DType::kInt32}).message(),
              HasSubstr("input 1 (labels) must be i32[3, 4] or i32[4]"));
  EXPECT_THAT(add_with(14, {Shape{32}, DType::kInt32}).message(),
              HasSubstr("input 14 (barrier) must be i32[64]"));
  EXPECT_TRUE(add_with(1, {Shape{4}, DType::kInt32}).ok());  // Labels every model shares.
  std::vector<TensorSpec> specs;
  for (const Value& v : node.inputs) specs.push_back(g.spec(v));
  EXPECT_TRUE(ops::CheckBatchedMlpTrainStepSupported(specs, codegen::MlpStepTarget{}).ok());
  specs.pop_back();
  EXPECT_EQ(ops::CheckBatchedMlpTrainStepSupported(specs, codegen::MlpStepTarget{}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Fills every input leaf of `cpu` with fresh values for step `step`.
void FeedInputs(const Graph& g, ir::ReferenceExecutor& cpu, int step, int64_t classes) {
  std::mt19937 rng(100 + step);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (int32_t id : g.NodesOf("input")) {
    const Node& n = g.node(id);
    if (n.outputs[0].shape.rank() == 0) continue;  // Hyperparameters keep their values.
    if (n.outputs[0].dtype == DType::kInt32) {
      std::vector<int32_t> l(n.outputs[0].NumElements());
      for (int32_t& v : l) v = static_cast<int32_t>(rng() % classes);
      ASSERT_TRUE(cpu.SetLeaf(n.name, l).ok()) << n.name;
    } else {
      std::vector<double> x(n.outputs[0].NumElements());
      for (double& v : x) v = uniform(rng);
      ASSERT_TRUE(cpu.SetLeaf(n.name, x).ok()) << n.name;
    }
  }
}

std::vector<double> Values(const ir::HostTensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.size(); ++i) {
    v.push_back(t.dtype() == DType::kFloat64 ? t.data<double>()[i] : t.data<float>()[i]);
  }
  return v;
}

class BatchedMlpStepReferenceTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// The whole-step node's reference against the per-layer batched step's (fused as the GPU path
// would be without it): the same bits over three steps, losses, logits, weights and momenta.
TEST_P(BatchedMlpStepReferenceTest, EqualsThePerLayerBatchedStepBitwise) {
  const auto [float64, shared] = GetParam();
  const models::MlpConfig c = Config(6, 5, 2, 9, 4);
  const BatchedTraining t = Batch(BuildEnsemble(3, c, shared));
  auto whole = passes::Fuse(t.training, Kept(t), AnyEnsemble());
  passes::FuseOptions per_layer_options = AnyEnsemble();
  per_layer_options.whole_mlp_step = false;
  auto per_layer = passes::Fuse(t.training, Kept(t), per_layer_options);
  ASSERT_TRUE(whole.ok() && per_layer.ok());
  ASSERT_EQ(OpCounts(whole->training.graph).count("batched_mlp_train_step"), 1u);
  const Graph& gw = whole->training.graph;
  const Graph& gp = per_layer->training.graph;
  ir::ReferenceExecutor got(gw, float64, 5), want(gp, float64, 5);
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(FeedInputs(gw, got, step, c.classes));
    ASSERT_NO_FATAL_FAILURE(FeedInputs(gp, want, step, c.classes));
    ASSERT_TRUE(got.Run().ok());
    ASSERT_TRUE(want.Run().ok());
    for (const Value& v : Kept(t)) {  // The total and each model's loss.
      EXPECT_EQ(Values(**got.Tensor(whole->values.at(v))),
                Values(**want.Tensor(per_layer->values.at(v))))
          << "step " << step;
    }
  }
  int compared = 0;
  for (const Node& n : gp.nodes()) {
    if (n.op != &ir::ParameterOp() && n.op != &ir::StateOp()) continue;
    EXPECT_EQ(Values(**got.Leaf(n.name)), Values(**want.Leaf(n.name))) << n.name;
    ++compared;
  }
  EXPECT_EQ(compared, 12);  // 3 layers: weight, bias and their momenta.
}

INSTANTIATE_TEST_SUITE_P(Float32AndFloat64OwnAndSharedInputs, BatchedMlpStepReferenceTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

class EachModelTest : public ::testing::TestWithParam<models::MlpConfig> {};

// Model by model, the whole-step node gives the bits of the unbatched models trained one by one
// in the user's graph (float32, three steps).
TEST_P(EachModelTest, EqualsItsUnbatchedModel) {
  constexpr int kModels = 4;
  const models::MlpConfig c = GetParam();
  const Ensemble e = BuildEnsemble(kModels, c, false);
  const BatchedTraining t = Batch(e);
  auto whole = passes::Fuse(t.training, Kept(t), AnyEnsemble());
  ASSERT_TRUE(whole.ok()) << whole.status();
  const Graph& gw = whole->training.graph;
  auto unbatched = autodiff::BuildTrainingGraph(e.graph, e.loss, kSgd);
  ASSERT_TRUE(unbatched.ok()) << unbatched.status();
  const Graph& gu = unbatched->graph;
  ir::ReferenceExecutor got(gw, false, 9), want(gu, false, 9);
  // Every stacked leaf starts as its members: slice k = the unbatched model k's tensor.
  auto copy_slices = [&](const std::string& stacked, const std::vector<std::string>& members) {
    ir::HostTensor* to = *got.Leaf(stacked);
    const int64_t bytes = to->spec().bytes() / static_cast<int64_t>(members.size());
    for (size_t k = 0; k < members.size(); ++k) {
      const ir::HostTensor* from = *want.Leaf(members[k]);
      ASSERT_EQ(from->spec().bytes(), bytes) << members[k];
      std::memcpy(static_cast<char*>(to->raw()) + k * bytes, from->raw(), bytes);
    }
  };
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(FeedInputs(gu, want, step, c.classes));
    for (const passes::StackedLeaf& leaf : t.batched.stacked) {
      if (step > 0 && gw.node(*gw.FindNode(leaf.name)).op != &ir::InputOp()) continue;
      std::vector<std::string> names;
      for (const auto& m : leaf.members) names.push_back(m.name);
      ASSERT_NO_FATAL_FAILURE(copy_slices(leaf.name, names));
    }
    ASSERT_TRUE(got.Run().ok());
    ASSERT_TRUE(want.Run().ok());
    const Value losses = whole->values.at(t.batched.kept[0]);
    for (int k = 0; k < kModels; ++k) {
      EXPECT_EQ(Values(**got.Tensor(losses))[k], Values(**want.Tensor(e.losses[k]))[0])
          << "model " << k << ", step " << step;
    }
  }
  for (const passes::ModelTensor& m : passes::ModelTensorNames(t.training.graph, t.batched)) {
    const ir::HostTensor* stacked = *got.Leaf(m.stacked);
    const std::vector<double> all = Values(*stacked);
    const int64_t per_model = stacked->size() / kModels;
    const std::vector<double> slice(all.begin() + m.model * per_model,
                                    all.begin() + (m.model + 1) * per_model);
    if (gw.node(*gw.FindNode(m.stacked)).op == &ir::InputOp()) continue;
    EXPECT_EQ(slice, Values(**want.Leaf(m.name))) << m.name;
  }
}

INSTANTIATE_TEST_SUITE_P(TwoHiddenLayersAndOneLayer, EachModelTest,
                         ::testing::Values(Config(7, 6, 2, 10, 3), Config(9, 6, 0, 1, 4)));

}  // namespace
}  // namespace reprise
