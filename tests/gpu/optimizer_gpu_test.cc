// The optimizers on the GPU: each new op's kernels against the CPU reference (the chunked
// multi-tensor kernels bit for bit over two tables of odd-sized tensors, and adam_multi with the
// schedule and the clip norm folded in, loss-scaled and skipped), and a 200-step MLP run with
// AdamW, clipping and a warm-up + cosine schedule whose graph replays give the bulked run's bits
// with no graph update or re-instantiation after the first capture, in three optimizer launches,
// whose first steps match the CPU reference (a deeper MLP too), and whose saved weights carry
// Adam's moments and the device step.
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/data_parallel_batches.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

const TensorSpec kScalar{Shape{}, DType::kFloat32};

Initializer Random() { return Initializer::Uniform(-1, 1); }

// The shared inputs of an adam node; `clip` adds a clip coefficient.
std::vector<Value> AdamShared(Graph& g, bool clip) {
  std::vector<Value> shared = {*g.AddInput("lr", kScalar, Initializer::Constant(0.01)),
                               *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros()),
                               *g.AddInput("beta1", kScalar, Initializer::Constant(0.9)),
                               *g.AddInput("beta2", kScalar, Initializer::Constant(0.999)),
                               *g.AddInput("eps", kScalar, Initializer::Constant(1e-8)),
                               *g.AddInput("wd", kScalar, Initializer::Constant(0.05))};
  if (clip) shared.push_back(*g.AddInput("clip", kScalar, Initializer::Constant(0.3)));
  return shared;
}

std::vector<Value> AdamTensor(Graph& g, const std::string& name, Shape shape) {
  return {*g.AddParameter(name, {shape}, Random()), *g.AddConstant(name + ".g", {shape}, Random()),
          *g.AddState(name + ".m", {shape}, Random()),
          *g.AddState(name + ".v", {shape}, Initializer::Uniform(0, 1))};
}

std::vector<Value> Concat(std::vector<Value> a, const std::vector<Value>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The kernels round each operation as the CPU reference does; the tolerance only allows for a
// double cosine or power differing in its last bit.
constexpr double kTolerance = 1e-6;

TEST(OptimizerGpuTest, AdamAndAdamWMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (bool clip : {false, true}) {
    Graph g;
    const std::vector<Value> shared = AdamShared(g, clip);
    ASSERT_TRUE(g.AddOp(ops::AdamOp(), "adam", Concat(AdamTensor(g, "a", Shape{1000}), shared),
                        {{"decoupled", false}})
                    .ok());
    ASSERT_TRUE(g.AddOp(ops::AdamOp(), "adamw", Concat(AdamTensor(g, "b", Shape{33, 7}), shared),
                        {{"decoupled", true}})
                    .ok());
    ir::ReferenceExecutor cpu(g, false, 4);
    ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{41, 0}).ok());
    ExpectGpuMatchesCpu(g, cpu, kTolerance);
  }
}

// Odd sizes (most not a multiple of 4, some of one element), whole and partial chunks of the
// norm (4096 elements), and one large tensor: tensor t of `tensors`.
Shape OddShape(int t) {
  static const int64_t kSizes[] = {1, 3, 4, 5, 33, 1000, 4095, 4096, 4097, 8191, 12289};
  return Shape{t == 3 ? 70001 : kSizes[t % 11] + 2 * t};
}

// Per tensor (w, g, m, v, weight decay), two weight decays taking turns.
std::vector<Value> AdamMultiTensors(Graph& g, int tensors) {
  const Value decayed = *g.AddInput("wd.multi", kScalar, Initializer::Constant(0.05));
  const Value none = *g.AddConstant("wd.none", kScalar, Initializer::Zeros());
  std::vector<Value> per_tensor;
  for (int t = 0; t < tensors; ++t) {
    per_tensor = Concat(per_tensor, AdamTensor(g, "t" + std::to_string(t), OddShape(t)));
    per_tensor.push_back(t % 3 == 1 ? none : decayed);
  }
  return per_tensor;
}

// Without a schedule the kernels compute the CPU reference's bits: every operation is rounded
// alike and the bias corrections are products only.
TEST(OptimizerGpuTest, AdamMultiGivesTheCpuBitsOverTwoTables) {
  REPRISE_REQUIRE_GPU();
  for (bool decoupled : {false, true}) {
    Graph g;
    const int tensors = 600;  // Two launches: 512 tensors and 88.
    std::vector<Value> shared = AdamShared(g, /*clip=*/true);
    shared.erase(shared.begin() + 5);  // Each tensor has its own weight decay.
    ASSERT_TRUE(g.AddOp(ops::AdamMultiOp(), "adam.all",
                        Concat(AdamMultiTensors(g, tensors), shared),
                        {{"decoupled", decoupled}, {"tensors", int64_t{tensors}}})
                    .ok());
    ir::ReferenceExecutor cpu(g, false, 5);
    ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{12, 0}).ok());
    ExpectGpuMatchesCpu(g, cpu, /*tolerance=*/0);
  }
}

Attrs CosineAttrs() {
  return {{"warmup_steps", int64_t{10}}, {"decay", std::string("cosine")},
          {"total_steps", int64_t{100}}, {"min_factor", 0.1},
          {"step_size", int64_t{0}},     {"gamma", 1.0}};
}

// The partial sums of many odd-sized gradients (two launches) are the CPU reference's bits, plain
// and unscaled by loss scaling's 1 / scale.
TEST(OptimizerGpuTest, GradSumSquaresGivesTheCpuBitsForManyOddTensors) {
  REPRISE_REQUIRE_GPU();
  for (bool scaled : {false, true}) {
    Graph g;
    std::vector<Value> grads;
    for (int t = 0; t < 700; ++t) {
      grads.push_back(*g.AddConstant("g" + std::to_string(t), {OddShape(t)}, Random()));
    }
    Attrs attrs;
    if (scaled) {
      grads.push_back(*g.AddInput("check", {Shape{2}}, Initializer::Zeros()));
      attrs["loss_scaled"] = true;
    }
    ASSERT_TRUE(g.AddOp1(ops::GradSumSquaresOp(), "partials", grads, attrs).ok());
    ir::ReferenceExecutor cpu(g, false, 8);
    if (scaled) ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, 0}).ok());
    ExpectGpuMatchesCpu(g, cpu, /*tolerance=*/0);
  }
}

// The update with the schedule and the clip norm folded in: every block reduces the partial sums
// and schedules the rate itself, and all of them must agree with the CPU reference (the rate's
// double cosine may differ in its last bit). Loss-scaled, and skipped by a found non-finite.
TEST(OptimizerGpuTest, FoldedAdamMultiMatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (const char* mode : {"plain", "scaled", "skipped"}) {
    for (int32_t step : {0, 7, 60, 150}) {
      SCOPED_TRACE(::testing::Message() << mode << ", step " << step);
      const bool scaled = std::string(mode) != "plain";
      Graph g;
      const int tensors = 40;
      std::vector<Value> per_tensor = AdamMultiTensors(g, tensors);
      std::vector<Value> grads;
      for (int t = 0; t < tensors; ++t) grads.push_back(per_tensor[5 * t + 1]);
      Attrs attrs = CosineAttrs();
      attrs["decoupled"] = true;
      attrs["tensors"] = int64_t{tensors};
      attrs["clip_norm"] = true;
      Attrs norm_attrs;
      Value check;
      if (scaled) {
        check = *g.AddInput("check", {Shape{2}}, Initializer::Zeros());
        grads.push_back(check);
        attrs["loss_scaled"] = norm_attrs["loss_scaled"] = true;
      }
      const Value partials = *g.AddOp1(ops::GradSumSquaresOp(), "partials", grads, norm_attrs);
      std::vector<Value> shared = AdamShared(g, /*clip=*/false);
      shared.pop_back();  // The weight decays are per tensor.
      shared.push_back(partials);
      shared.push_back(*g.AddInput("max_norm", kScalar, Initializer::Constant(0.5)));
      if (scaled) shared.push_back(check);
      ASSERT_TRUE(g.AddOp(ops::AdamMultiOp(), "adam.all", Concat(per_tensor, shared), attrs).ok());
      ir::ReferenceExecutor cpu(g, false, 9);
      ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{step, 0}).ok());
      if (scaled) {
        const double found = std::string(mode) == "skipped" ? 1 : 0;
        ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.25, found}).ok());
      }
      ExpectGpuMatchesCpu(g, cpu, kTolerance);
    }
  }
}

TEST(OptimizerGpuTest, NesterovAndClippedSgdMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (bool multi : {false, true}) {
    Graph g;
    std::vector<Value> per_tensor;
    for (int t = 0; t < 3; ++t) {
      const Shape shape{100 + 1000 * t};
      const std::string name = "w" + std::to_string(t);
      per_tensor = Concat(per_tensor, {*g.AddParameter(name, {shape}, Random()),
                                       *g.AddConstant(name + ".g", {shape}, Random()),
                                       *g.AddState(name + ".v", {shape}, Random())});
    }
    std::vector<Value> shared;
    for (auto [name, value] : {std::pair{"lr", 0.1}, {"mu", 0.9}, {"wd", 0.01}, {"clip", 0.4}}) {
      shared.push_back(*g.AddInput(name, kScalar, Initializer::Constant(value)));
    }
    if (multi) {
      ASSERT_TRUE(g.AddOp(ops::SgdMomentumMultiOp(), "sgd.all", Concat(per_tensor, shared),
                          {{"nesterov", true}, {"tensors", int64_t{3}}})
                      .ok());
    } else {
      for (int t = 0; t < 3; ++t) {
        std::vector<Value> in(per_tensor.begin() + 3 * t, per_tensor.begin() + 3 * t + 3);
        ASSERT_TRUE(g.AddOp(ops::SgdMomentumOp(), "sgd" + std::to_string(t), Concat(in, shared),
                            {{"nesterov", true}})
                        .ok());
      }
    }
    ir::ReferenceExecutor cpu(g, false, 6);
    ExpectGpuMatchesCpu(g, cpu, kTolerance);
  }
}

// sgd_momentum_multi reading 16-bit gradients (the widening cast folded in by the fuse pass):
// bit for bit the CPU reference's update of the exactly widened gradients, plain and Nesterov,
// over sizes that take the 4-element path, its tail and the element path.
TEST(OptimizerGpuTest, MultiTensorSgdReads16BitGradientsBitwise) {
  REPRISE_REQUIRE_GPU();
  for (DType gradient : {DType::kBFloat16, DType::kFloat16}) {
    for (bool nesterov : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(gradient), nesterov ? " nesterov" : " plain"));
      Graph g;
      std::vector<Value> per_tensor;
      const std::vector<int64_t> sizes = {4096, 1003, 3, 70001};
      for (size_t t = 0; t < sizes.size(); ++t) {
        const Shape shape{sizes[t]};
        const std::string name = "w" + std::to_string(t);
        per_tensor = Concat(per_tensor, {*g.AddParameter(name, {shape}, Random()),
                                         *g.AddConstant(name + ".g", {shape, gradient}, Random()),
                                         *g.AddState(name + ".v", {shape}, Random())});
      }
      std::vector<Value> shared;
      for (auto [name, value] : {std::pair{"lr", 0.1}, {"mu", 0.9}, {"wd", 0.01}}) {
        shared.push_back(*g.AddInput(name, kScalar, Initializer::Constant(value)));
      }
      Attrs attrs = {{"tensors", static_cast<int64_t>(sizes.size())}};
      if (nesterov) attrs["nesterov"] = true;
      ASSERT_TRUE(
          g.AddOp(ops::SgdMomentumMultiOp(), "sgd.all", Concat(per_tensor, shared), attrs).ok());
      ir::ReferenceExecutor cpu(g, false, 8);
      ExpectGpuMatchesCpu(g, cpu, 0.0);
    }
  }
}

TEST(OptimizerGpuTest, GlobalNormAndClipCoefficientMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (double max_norm : {0.5, 1e6}) {
    Graph g;
    std::vector<Value> grads;
    for (int64_t n : {70000, 33, 4096, 1, 4097}) {
      grads.push_back(*g.AddConstant("g" + std::to_string(n), {Shape{n}}, Random()));
    }
    Value partials = *g.AddOp1(ops::GradSumSquaresOp(), "partials", grads);
    Value max = *g.AddInput("max_norm", kScalar, Initializer::Constant(max_norm));
    ASSERT_TRUE(g.AddOp(ops::ClipCoefficientOp(), "clip", {partials, max}).ok());
    ir::ReferenceExecutor cpu(g, false, 7);
    ExpectGpuMatchesCpu(g, cpu, kTolerance);
  }
}

TEST(OptimizerGpuTest, LrScheduleMatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  const Attrs schedules[] = {
      {{"warmup_steps", int64_t{10}},
       {"decay", std::string("cosine")},
       {"total_steps", int64_t{100}},
       {"min_factor", 0.1},
       {"step_size", int64_t{0}},
       {"gamma", 1.0}},
      {{"warmup_steps", int64_t{0}},
       {"decay", std::string("step")},
       {"total_steps", int64_t{0}},
       {"min_factor", 0.0},
       {"step_size", int64_t{7}},
       {"gamma", 0.5}},
  };
  for (const Attrs& attrs : schedules) {
    for (int32_t step : {0, 5, 37, 150}) {
      Graph g;
      Value lr = *g.AddInput("lr", kScalar, Initializer::Constant(0.3));
      Value counter = *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros());
      ASSERT_TRUE(g.AddOp1(ops::LrScheduleOp(), "rate", {lr, counter}, attrs).ok());
      ir::ReferenceExecutor cpu(g, false, 1);
      ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{step, 0}).ok());
      ExpectGpuMatchesCpu(g, cpu, kTolerance);
    }
  }
}

// The training run ---------------------------------------------------------------------------

constexpr int kBatch = 32, kFeatures = testing::kDpFeatures, kClasses = testing::kDpClasses;

// Depth 3 has 8 parameter tensors; depth 16, 34 (a table of 64 in the chunked kernels).
models::MlpConfig SmallMlp(int depth = 3) {
  return {.batch = kBatch,
          .input_features = kFeatures,
          .depth = depth,
          .width = 64,
          .classes = kClasses};
}

OptimizerOptions AdamWClippedCosine() {
  return {.kind = OptimizerKind::kAdamW,
          .learning_rate = 3e-3f,
          .weight_decay = 0.01f,
          .decay_rank1 = false,
          .max_grad_norm = 1.0f,
          .schedule = {.warmup_steps = 20,
                       .decay = LrDecay::kCosine,
                       .total_steps = 200,
                       .min_lr_factor = 0.1f}};
}

using Batch = testing::DpBatch;

// Labels follow a fixed linear rule of the features, so there is something to learn.
Batch MakeBatch(std::mt19937& rng) { return testing::MakeDpBatch(rng, kBatch); }

std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp, ExecMode mode) {
  TrainOptions options;
  options.launch.mode = mode;
  options.seed = 42;
  options.optimizer = AdamWClippedCosine();
  auto trainer = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// `steps` steps on fresh batches; the base rate is rebound half way, as a user would.
std::vector<float> Train(Trainer& t, int steps) {
  std::mt19937 rng(5);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    Batch b = MakeBatch(rng);
    EXPECT_TRUE(t.SetInput("features", b.x).ok());
    EXPECT_TRUE(t.SetInput("labels", b.y).ok());
    if (s == steps / 2) EXPECT_TRUE(t.SetLearningRate(2e-3f).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

TEST(OptimizerGpuTest, AdamWClippedCosineReplaysBitwiseWithNoGraphUpdates) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok());
  auto bulked = MakeTrainer(*mlp, ExecMode::kBulked);
  auto graph = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(bulked && graph);
  const std::vector<float> bulked_losses = Train(*bulked, 200);
  const std::vector<float> graph_losses = Train(*graph, 200);
  EXPECT_EQ(bulked_losses, graph_losses);
  // Every parameter, both moments and the step counter, bit for bit.
  testing::ScopedTempDir dir;
  ASSERT_TRUE(bulked->SaveWeights(dir.path() + "/bulked.safetensors").ok());
  ASSERT_TRUE(graph->SaveWeights(dir.path() + "/graph.safetensors").ok());
  EXPECT_TRUE(testing::ReadFile(dir.path() + "/bulked.safetensors") ==
              testing::ReadFile(dir.path() + "/graph.safetensors"));
  float first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += graph_losses[i], last += graph_losses[190 + i];
  EXPECT_LT(last, 0.8f * first) << ::testing::PrintToString(graph_losses);
  const TrainerStats stats = graph->stats();
  EXPECT_EQ(stats.graph_replays, 200);
  EXPECT_EQ(stats.graph_captures, 1);
  EXPECT_EQ(stats.graph_instantiations, 1);
  EXPECT_EQ(stats.graph_exec_updates, 0);
  EXPECT_EQ(stats.graph_node_updates, 0);
  // Three launches update every parameter: the norm's partial sums, one adam_multi (decayed and
  // undecayed tensors, the schedule and the norm's last stage folded in) and the counter.
  std::map<std::string, int> optimizer_ops;
  for (const Node& node : graph->training_graph().nodes()) {
    if (node.op->kind == ir::OpKind::kOptimizer) ++optimizer_ops[std::string(node.op_name())];
  }
  // And the non-finite guard (on by default): its check over the gradients in the norm's pass,
  // one verdict that also counts.
  EXPECT_EQ(optimizer_ops, (std::map<std::string, int>{{"adam_multi", 1},
                                                       {"advance_step", 1},
                                                       {"grad_sum_squares_nonfinite", 1},
                                                       {"loss_scale_check", 1}}));
}

// A deeper MLP: more tensors than one table of 32, replays bitwise with no graph update.
TEST(OptimizerGpuTest, DeeperMlpReplaysBitwise) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp(16));
  ASSERT_TRUE(mlp.ok());
  auto bulked = MakeTrainer(*mlp, ExecMode::kBulked);
  auto graph = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(bulked && graph);
  EXPECT_EQ(Train(*bulked, 40), Train(*graph, 40));
  testing::ScopedTempDir dir;
  ASSERT_TRUE(bulked->SaveWeights(dir.path() + "/bulked.safetensors").ok());
  ASSERT_TRUE(graph->SaveWeights(dir.path() + "/graph.safetensors").ok());
  EXPECT_TRUE(testing::ReadFile(dir.path() + "/bulked.safetensors") ==
              testing::ReadFile(dir.path() + "/graph.safetensors"));
  EXPECT_EQ(graph->stats().graph_exec_updates, 0);
  EXPECT_EQ(graph->stats().graph_node_updates, 0);
}

// The GPU trainer's losses over five steps against the unfused CPU reference.
void ExpectFirstStepsMatchTheCpuReference(int depth) {
  auto mlp = models::BuildMlp(SmallMlp(depth));
  auto gpu = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(gpu);
  auto training = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, AdamWClippedCosine());
  ASSERT_TRUE(training.ok()) << training.status();
  ir::ReferenceExecutor cpu(training->graph, /*float64=*/false, /*seed=*/42);
  std::mt19937 rng(9);
  for (int s = 0; s < 5; ++s) {
    Batch b = MakeBatch(rng);
    ASSERT_TRUE(gpu->SetInput("features", b.x).ok());
    ASSERT_TRUE(gpu->SetInput("labels", b.y).ok());
    ASSERT_TRUE(gpu->Step().ok());
    ASSERT_TRUE(cpu.SetLeaf("features", std::vector<double>(b.x.begin(), b.x.end())).ok());
    ASSERT_TRUE(cpu.SetLeaf("labels", b.y).ok());
    ASSERT_TRUE(cpu.Run().ok());
    const float cpu_loss = (*cpu.Tensor(mlp->loss))->data<float>()[0];
    EXPECT_NEAR(*gpu->Loss(), cpu_loss, 1e-4f * std::max(1.0f, std::abs(cpu_loss))) << "step " << s;
  }
}

TEST(OptimizerGpuTest, FirstStepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (int depth : {3, 16}) {
    SCOPED_TRACE(::testing::Message() << "depth " << depth);
    ExpectFirstStepsMatchTheCpuReference(depth);
  }
}

// The long run: 10,000 replays through the warm-up, the whole cosine and the floor, with
// clipping, and the captured graph is never touched again.
TEST(OptimizerGpuTest, TenThousandReplaysNeedNoGraphUpdate) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  TrainOptions options;
  options.seed = 3;
  options.optimizer = AdamWClippedCosine();
  options.optimizer.schedule.total_steps = 8000;
  auto trainer = Trainer::Create(mlp->graph, mlp->loss, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::mt19937 rng(1);
  Batch b = MakeBatch(rng);
  ASSERT_TRUE((*trainer)->SetInput("features", b.x).ok());
  ASSERT_TRUE((*trainer)->SetInput("labels", b.y).ok());
  for (int s = 0; s < 10000; ++s) ASSERT_TRUE((*trainer)->Step().ok());
  const float loss = *(*trainer)->Loss();
  EXPECT_TRUE(std::isfinite(loss));
  const TrainerStats stats = (*trainer)->stats();
  EXPECT_EQ(stats.graph_replays, 10000);
  EXPECT_EQ(stats.graph_instantiations, 1);
  EXPECT_EQ(stats.graph_exec_updates, 0);
  EXPECT_EQ(stats.graph_node_updates, 0);
}

TEST(OptimizerGpuTest, SavedWeightsCarryAdamsMomentsAndTheDeviceStep) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto trainer = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(trainer);
  Train(*trainer, 7);
  testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/adamw.safetensors";
  ASSERT_TRUE(trainer->SaveWeights(path).ok());
  auto file = util::ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const char* name : {"fc0.weight.exp_avg", "fc0.weight.exp_avg_sq", "fc3.bias.exp_avg"}) {
    EXPECT_NE(file->Find(name), nullptr) << name;
  }
  const util::SafetensorsEntry* step = file->Find(autodiff::kStepCounter);
  ASSERT_NE(step, nullptr);
  int32_t words[2];
  std::memcpy(words, file->Data(*step).data(), sizeof(words));
  EXPECT_EQ(words[0], 7);
  EXPECT_EQ(words[1], 0);
}

}  // namespace
}  // namespace reprise
