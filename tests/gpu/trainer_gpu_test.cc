// The training step on the GPU: graph replay gives the same bits as the bulked run of the same
// plan, inputs and learning rate change between replays without re-instantiation, the step
// matches the CPU reference, bad bindings are clear errors, and nothing leaks.
#include <algorithm>
#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/runtime/device.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/cpu/scoped_env.h"
#include "tests/gpu/data_parallel_batches.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 32, kFeatures = testing::kDpFeatures, kClasses = testing::kDpClasses;

models::MlpConfig SmallMlp() {
  return {
      .batch = kBatch, .input_features = kFeatures, .depth = 3, .width = 64, .classes = kClasses};
}

using Batch = testing::DpBatch;

// Labels follow a fixed linear rule of the features, so there is something to learn.
Batch MakeBatch(std::mt19937& rng) { return testing::MakeDpBatch(rng, kBatch); }

std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp, ExecMode mode, bool fuse = true,
                                     bool whole_step = true) {
  TrainOptions options;
  options.launch.mode = mode;
  options.kernels.fuse = fuse;
  options.kernels.whole_step = whole_step;
  options.seed = 42;
  auto trainer = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Trains `steps` steps, changing the batch every step and the learning rate every 10 steps
// (0.1, 0.15, 0.2, 0.1, ...).
std::vector<float> Train(Trainer& t, int steps) {
  std::mt19937 rng(5);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    Batch b = MakeBatch(rng);
    EXPECT_TRUE(t.SetInput("features", b.x).ok());
    EXPECT_TRUE(t.SetInput("labels", b.y).ok());
    if (s % 10 == 0) EXPECT_TRUE(t.SetLearningRate(0.1f + 0.05f * (s / 10 % 3)).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

TEST(TrainerGpuTest, GraphReplayEqualsBulkedBitwiseAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok());
  auto bulked = MakeTrainer(*mlp, ExecMode::kBulked);
  auto graph = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(bulked && graph);
  const std::vector<float> bulked_losses = Train(*bulked, 100);
  const std::vector<float> graph_losses = Train(*graph, 100);
  EXPECT_EQ(bulked_losses, graph_losses);
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*bulked->GetParameter(name), *graph->GetParameter(name)) << name;
  }
  float first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += graph_losses[i], last += graph_losses[90 + i];
  EXPECT_LT(last, 0.6f * first) << ::testing::PrintToString(graph_losses);
  const TrainerStats stats = graph->stats();
  EXPECT_EQ(stats.graph_replays, 100);
  EXPECT_EQ(stats.graph_instantiations, 1);
  // cuBLASLt may add nodes of its own (a split-K reduction, a memset) beside each matmul.
  EXPECT_GE(stats.graph_nodes, stats.launches_per_step);
}

// Measured cuBLASLt algorithms: the step still replays the bits of its eager run (the choice is
// fixed at Create), each launch says it was measured, and training follows the heuristic's
// choice to fp32 accuracy. An empty kernel cache of its own, so that Create measures: a choice
// recorded by an earlier run in the shared cache would be taken from its record instead.
TEST(TrainerGpuTest, MeasuredMatmulAlgorithmsReplayBitwiseAndTrain) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok());
  testing::ScopedTempDir cache;
  testing::ScopedEnv cache_dir("REPRISE_CACHE_DIR", cache.path());
  std::vector<std::vector<float>> losses;
  for (bool measure : {false, true}) {
    TrainOptions options;
    options.launch.mode = ExecMode::kGraph;
    options.kernels.whole_step = false;  // Per-layer cuBLASLt products.
    options.kernels.measure_matmul_algorithms = measure;
    options.seed = 42;
    auto trainer = Trainer::Create(mlp->graph, mlp->loss, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    losses.push_back(Train(**trainer, 30));
    if (!measure) continue;
    auto verify = (*trainer)->Verify(10);
    ASSERT_TRUE(verify.ok()) << verify.status();
    EXPECT_TRUE(verify->ok()) << verify->ToString();
    auto times = (*trainer)->ProfileLaunches(1);
    ASSERT_TRUE(times.ok()) << times.status();
    int measured = 0;
    for (const Trainer::LaunchTime& t : *times) {
      measured += t.kernel.find("cublasLt") != std::string::npos &&
                  t.kernel.find("measured: candidate") != std::string::npos;
    }
    EXPECT_GE(measured, 4);
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[0][i], losses[1][i], 1e-3f * std::max(1.0f, std::abs(losses[0][i]))) << i;
  }
}

TEST(TrainerGpuTest, SyncModeEqualsBulkedBitwise) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto sync = MakeTrainer(*mlp, ExecMode::kSync);
  auto bulked = MakeTrainer(*mlp, ExecMode::kBulked);
  ASSERT_TRUE(sync && bulked);
  EXPECT_EQ(Train(*sync, 20), Train(*bulked, 20));
}

// Fusion changes the GEMM epilogue's rounding, so fused and unfused agree to fp32 accuracy; each
// of them is still bitwise reproducible (the sync/bulked/graph tests run fused).
TEST(TrainerGpuTest, FusedAndUnfusedStepsAgree) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto whole = MakeTrainer(*mlp, ExecMode::kGraph, /*fuse=*/true, /*whole_step=*/true);
  auto per_layer = MakeTrainer(*mlp, ExecMode::kGraph, /*fuse=*/true, /*whole_step=*/false);
  auto unfused = MakeTrainer(*mlp, ExecMode::kGraph, /*fuse=*/false);
  ASSERT_TRUE(whole && per_layer && unfused);
  EXPECT_EQ(whole->stats().launches_per_step, 2);  // The input copy and the whole step.
  // The non-finite guard's three launches (check, verdict, count) are in both.
  constexpr int64_t kGuardLaunches = 3;
  EXPECT_LT(per_layer->stats().launches_per_step - kGuardLaunches,
            (unfused->stats().launches_per_step - kGuardLaunches) / 2 + 2);
  const std::vector<float> reference = Train(*unfused, 20);
  for (Trainer* fused : {whole.get(), per_layer.get()}) {
    const std::vector<float> losses = Train(*fused, 20);
    for (int s = 0; s < 20; ++s) {
      EXPECT_NEAR(losses[s], reference[s], 1e-4f * std::max(1.0f, reference[s])) << "step " << s;
    }
    for (const std::string& name : fused->ParameterNames()) {
      std::vector<float> f = *fused->GetParameter(name), u = *unfused->GetParameter(name);
      double err = 0, norm = 0;
      for (size_t i = 0; i < f.size(); ++i)
        err += (f[i] - u[i]) * (f[i] - u[i]), norm += u[i] * u[i];
      EXPECT_LT(std::sqrt(err / norm), 1e-4) << name;
    }
  }
  auto unfused_sync = MakeTrainer(*mlp, ExecMode::kSync, /*fuse=*/false);
  auto unfused_bulked = MakeTrainer(*mlp, ExecMode::kBulked, /*fuse=*/false);
  EXPECT_EQ(Train(*unfused_sync, 10), Train(*unfused_bulked, 10));
  auto per_layer_bulked = MakeTrainer(*mlp, ExecMode::kBulked, /*fuse=*/true, false);
  auto per_layer_graph = MakeTrainer(*mlp, ExecMode::kGraph, /*fuse=*/true, false);
  EXPECT_EQ(Train(*per_layer_bulked, 10), Train(*per_layer_graph, 10));
}

// The ReLU-backward epilogues (TrainOptions::kernels.relu_backward_epilogues): the per-layer step
// with them agrees with the unfused step to fp32 accuracy and its replay is bitwise its bulked run.
TEST(TrainerGpuTest, ReluBackwardEpiloguesAgreeAndReplayBitwise) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok());
  auto make = [&](ExecMode mode, bool epilogues) {
    TrainOptions options;
    options.launch.mode = mode;
    options.kernels.whole_step = false;
    options.kernels.relu_backward_epilogues = epilogues;
    options.seed = 42;
    auto trainer = Trainer::Create(mlp->graph, mlp->loss, options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    return trainer.ok() ? *std::move(trainer) : nullptr;
  };
  auto graph = make(ExecMode::kGraph, true);
  auto bulked = make(ExecMode::kBulked, true);
  auto plain = make(ExecMode::kGraph, false);
  ASSERT_TRUE(graph && bulked && plain);
  // Three hidden layers: three relu_grad + bias-gradient kernels fewer.
  EXPECT_EQ(graph->stats().launches_per_step, plain->stats().launches_per_step - 3);
  const std::vector<float> losses = Train(*graph, 30);
  EXPECT_EQ(losses, Train(*bulked, 30));
  const std::vector<float> reference = Train(*plain, 30);
  for (int s = 0; s < 30; ++s) {
    EXPECT_NEAR(losses[s], reference[s], 1e-4f * std::max(1.0f, reference[s])) << "step " << s;
  }
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*graph->GetParameter(name), *bulked->GetParameter(name)) << name;
    std::vector<float> f = *graph->GetParameter(name), u = *plain->GetParameter(name);
    double err = 0, norm = 0;
    for (size_t i = 0; i < f.size(); ++i) err += (f[i] - u[i]) * (f[i] - u[i]), norm += u[i] * u[i];
    EXPECT_LT(std::sqrt(err / norm), 1e-4) << name;
  }
}

TEST(TrainerGpuTest, StepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto gpu = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(gpu);
  auto training = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, SgdOptions{});
  ASSERT_TRUE(training.ok());
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
    EXPECT_NEAR(*gpu->Loss(), cpu_loss, 1e-5f * std::max(1.0f, std::abs(cpu_loss))) << "step " << s;
  }
  for (const std::string& name : gpu->ParameterNames()) {
    std::vector<float> g = *gpu->GetParameter(name);
    auto c = (*cpu.Leaf(name))->data<float>();
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) err += (g[i] - c[i]) * (g[i] - c[i]), norm += c[i] * c[i];
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << name;
  }
}

TEST(TrainerGpuTest, BadBindingsAreClearErrors) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto t = MakeTrainer(*mlp, ExecMode::kGraph);
  ASSERT_TRUE(t);
  std::vector<float> short_x(kBatch * kFeatures - 1);
  EXPECT_THAT(t->SetInput("features", short_x).message(), HasSubstr("f32[32, 16]"));
  EXPECT_EQ(t->SetInput("nope", short_x).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t->SetInput("labels", std::vector<float>(kBatch)).message(), HasSubstr("i32"));
  std::vector<int32_t> bad_labels(kBatch, 0);
  bad_labels[3] = kClasses;
  EXPECT_THAT(t->SetInput("labels", bad_labels).message(), HasSubstr("outside [0, 5)"));
  EXPECT_EQ(t->GetParameter("fc9.weight").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->SetParameter("fc0.weight", std::vector<float>(3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Read(mlp->logits).status().code(), absl::StatusCode::kInvalidArgument);
  // A value of another graph, even one that names a readable node's number here.
  auto twin = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(twin.ok());
  const absl::Status foreign = t->Read(twin->loss).status();
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument) << foreign;
  EXPECT_THAT(foreign.message(), HasSubstr("made by another graph"));
}

TEST(TrainerGpuTest, CreatingAndDestroyingTrainersLeaksNoDeviceMemory) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(SmallMlp());
  auto trainers = [&](int count) {
    for (int i = 0; i < count; ++i) {
      auto t = MakeTrainer(*mlp, ExecMode::kGraph);
      ASSERT_TRUE(t);
      Train(*t, 3);
    }
  };
  // A first round lets what the process keeps settle: context and library handles, the kernels
  // the steps load (CUDA may load a kernel's module lazily, at its first launch), and the
  // driver's pools, which after a whole suite of other tests once grew by 2 MiB during the first
  // trainers measured (H200, 2026-11-29). A leak grows with every trainer.
  trainers(3);
  auto before = runtime::DeviceMemoryInUse();
  ASSERT_TRUE(before.ok());
  trainers(5);
  EXPECT_EQ(*runtime::DeviceMemoryInUse(), *before);
}

}  // namespace
}  // namespace reprise
