// Trainer::CompileForward on the GPU with an MLP: the evaluation loss equals the trainer's Loss()
// on the same batch before a step, and follows the trainer's parameters in place after it; the
// captured run gives the eager run's bits; counters; the errors; no device memory leaked.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kBatch = 16, kFeatures = 8, kClasses = 4;

models::MlpConfig Config() {
  return {
      .batch = kBatch, .input_features = kFeatures, .depth = 2, .width = 32, .classes = kClasses};
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

Batch MakeBatch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Batch b{std::vector<float>(kBatch * kFeatures), std::vector<int32_t>(kBatch)};
  for (float& v : b.x) v = normal(rng);
  for (int i = 0; i < kBatch; ++i) b.y[i] = static_cast<int32_t>(rng() % kClasses);
  return b;
}

std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp, bool whole_step = true) {
  TrainOptions options;
  options.seed = 7;
  options.kernels.whole_step = whole_step;
  // SGD lets the whole-step MLP kernel take the step (it updates the parameters where the runner
  // reads them); AdamW runs a launch per layer.
  if (whole_step) {
    options.optimizer.learning_rate = 0.05f;
  } else {
    options.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdamW, .learning_rate = 1e-2f};
  }
  auto trainer = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

float RunLoss(ForwardRunner& runner, const models::Mlp& eval, const Batch& b) {
  EXPECT_TRUE(runner.SetInput("features", b.x).ok());
  EXPECT_TRUE(runner.SetInput("labels", b.y).ok());
  EXPECT_TRUE(runner.Run().ok());
  auto loss = runner.Read(eval.loss);
  EXPECT_TRUE(loss.ok()) << loss.status();
  return loss.ok() ? (*loss)[0] : NAN;
}

float StepLoss(Trainer& trainer, const Batch& b) {
  EXPECT_TRUE(trainer.SetInput("features", b.x).ok());
  EXPECT_TRUE(trainer.SetInput("labels", b.y).ok());
  EXPECT_TRUE(trainer.Step().ok());
  auto loss = trainer.Loss();
  EXPECT_TRUE(loss.ok()) << loss.status();
  return loss.ok() ? *loss : NAN;
}

// The evaluation of a batch before a step sees the weights that step's loss sees; after the step
// it sees the updated weights (read in place, nothing copied), as the next step's loss does. The
// training inputs are the runner's business no more than the trainer's are the runner's.
TEST(ForwardRunnerGpuTest, EvalLossEqualsTheTrainersLossBeforeEachStep) {
  REPRISE_REQUIRE_GPU();
  for (bool whole_step : {true, false}) {
    auto mlp = models::BuildMlp(Config());
    ASSERT_TRUE(mlp.ok());
    auto trainer = MakeTrainer(*mlp, whole_step);
    ASSERT_TRUE(trainer);
    auto eval = models::BuildMlp(Config());  // Its own graph: matched by names.
    ASSERT_TRUE(eval.ok());
    REPRISE_ASSERT_OK_AND_ASSIGN(auto runner,
                                 trainer->CompileForward(eval->graph, {eval->loss, eval->logits}));
    const Batch train = MakeBatch(1), held_out = MakeBatch(2);
    for (int step = 0; step < 3; ++step) {
      const float before = RunLoss(*runner, *eval, train);
      const float held = RunLoss(*runner, *eval, held_out);
      const float trained = StepLoss(*trainer, train);
      EXPECT_NEAR(before, trained, 1e-5 * std::abs(trained)) << "step " << step;
      EXPECT_NE(held, before);
    }
    const ForwardStats stats = runner->stats();
    EXPECT_EQ(stats.runs, 6);
    EXPECT_EQ(stats.graph_replays, 6);
    EXPECT_EQ(stats.graph_captures, 1);
    EXPECT_GT(stats.graph_nodes, 0);
    // fc0 [32, 8] + [32], fc1 [32, 32] + [32], fc2 [4, 32] + [4], float32.
    EXPECT_EQ(stats.shared_parameter_bytes, 4 * (32 * 8 + 32 + 32 * 32 + 32 + 4 * 32 + 4));
    EXPECT_EQ(stats.state_bytes, 0);
  }
}

TEST(ForwardRunnerGpuTest, CapturedRunEqualsEagerRunBitForBit) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(Config());
  ASSERT_TRUE(mlp.ok());
  auto trainer = MakeTrainer(*mlp);
  ASSERT_TRUE(trainer);
  StepLoss(*trainer, MakeBatch(4));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto graph,
                               trainer->CompileForward(mlp->graph, {mlp->logits, mlp->loss}));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto eager,
                               trainer->CompileForward(mlp->graph, {mlp->logits, mlp->loss},
                                                       ForwardOptions{.mode = ExecMode::kBulked}));
  const Batch b = MakeBatch(5);
  RunLoss(*graph, *mlp, b);
  RunLoss(*eager, *mlp, b);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> a, graph->Read(mlp->logits));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> e, eager->Read(mlp->logits));
  ASSERT_EQ(a.size(), static_cast<size_t>(kBatch * kClasses));
  EXPECT_EQ(a, e);
  EXPECT_EQ(eager->stats().graph_replays, 0);
  EXPECT_EQ(eager->stats().graph_captures, 0);
}

TEST(ForwardRunnerGpuTest, ErrorsNameTheParameterInputOrOutput) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(Config());
  ASSERT_TRUE(mlp.ok());
  auto trainer = MakeTrainer(*mlp);
  ASSERT_TRUE(trainer);
  // A parameter of another shape, and one the trainer lacks.
  models::MlpConfig wider = Config();
  wider.width = 48;
  auto other = models::BuildMlp(wider);
  ASSERT_TRUE(other.ok());
  absl::Status status = trainer->CompileForward(other->graph, {other->loss}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("fc0.weight"), HasSubstr("f32[48, 8]"), HasSubstr("f32[32, 8]")));
  Graph extra;
  REPRISE_ASSERT_OK_AND_ASSIGN(Value x, extra.AddInput("features", {Shape{kBatch, kFeatures}}));
  REPRISE_ASSERT_OK_AND_ASSIGN(Value y, nn::Linear(extra, x, 3, "probe"));
  status = trainer->CompileForward(extra, {y}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("'probe."));
  status = trainer->CompileForward(mlp->graph, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;

  REPRISE_ASSERT_OK_AND_ASSIGN(auto runner, trainer->CompileForward(mlp->graph, {mlp->loss}));
  const Batch b = MakeBatch(6);
  EXPECT_EQ(runner->SetInput("pixels", b.x).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runner->SetInput("features", b.y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->SetInput("features", std::vector<float>(3)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = b.y;
  bad[5] = kClasses;
  status = runner->SetInput("labels", bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("labels"));
  EXPECT_EQ(runner->Read(mlp->logits).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->ReadInt32(mlp->loss).status().code(), absl::StatusCode::kInvalidArgument);
  // The loss of another graph (with the same node number) is not this runner's.
  status = runner->Read(other->loss).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("made by another graph"));
}

TEST(ForwardRunnerGpuTest, RunnersLeakNoDeviceMemory) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(Config());
  ASSERT_TRUE(mlp.ok());
  auto trainer = MakeTrainer(*mlp);
  ASSERT_TRUE(trainer);
  auto runners = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto runner = trainer->CompileForward(mlp->graph, {mlp->loss, mlp->logits});
      ASSERT_TRUE(runner.ok()) << runner.status();
      RunLoss(**runner, *mlp, MakeBatch(i));
    }
  };
  runners(2);  // What the process keeps (kernels loaded at first launch) settles first.
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t before, runtime::DeviceMemoryInUse());
  runners(4);
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t after, runtime::DeviceMemoryInUse());
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace reprise
