// The non-finite guard on the GPU (TrainOptions::numerics.non_finite): an MLP trained with one NaN
// among its input features, as the whole-step kernel (the default) and per layer. kSkipStep (the
// default) leaves every weight as it was and counts one skipped step, with replay giving the eager
// run's bits; kStop makes the next waiting call return a Status naming the step and the NaN input;
// kIgnore lets the NaN into the weights; a NaN feature reaches the loss through the unfused ReLU
// kernels, as on the CPU reference; and checkpoints keep the guard's counters.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/parameter_values.h"

namespace reprise {
namespace {

using ::reprise::testing::AnyNan;
using ::reprise::testing::ParameterValues;

using ::testing::HasSubstr;

constexpr int kBatch = 32, kFeatures = 64;

models::Mlp SmallMlp() {
  auto mlp = models::BuildMlp(
      {.batch = kBatch, .input_features = kFeatures, .depth = 3, .width = 128, .classes = 10});
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return *std::move(mlp);
}

// The small MLP's default step is the whole-step kernel, guarded inside itself; whole_step =
// false runs the per-layer step, guarded by its own launches.
std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp, TrainOptions options) {
  options.seed = 42;
  auto trainer = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Batch `step`; with `nan` one feature (row 5, column 17) is a NaN, as in issue 39.
absl::Status Feed(Trainer& t, int step, bool nan = false) {
  std::mt19937 rng(70 + step);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * kFeatures);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(kBatch);
  for (int i = 0; i < kBatch; ++i)
    y[i] = static_cast<int32_t>((x[i * kFeatures] > 0) + 2 * (i % 4));
  if (nan) x[5 * kFeatures + 17] = std::numeric_limits<float>::quiet_NaN();
  RETURN_IF_ERROR(t.SetInput("features", x));
  return t.SetInput("labels", y);
}

// The case, guarded by default: the NaN step changes nothing and is counted, and
// training goes on.
TEST(NonFiniteGuardGpuTest, SkipStepLeavesWeightsUnchangedAndCountsIt) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  for (const auto& [mode, whole_step] : {std::pair{ExecMode::kGraph, true},
                                         {ExecMode::kBulked, true},
                                         {ExecMode::kGraph, false},
                                         {ExecMode::kBulked, false}}) {
    SCOPED_TRACE(absl::StrCat(ExecModeName(mode), whole_step ? ", whole step" : ", per layer"));
    TrainOptions options;
    options.launch.mode = mode;
    options.kernels.whole_step = whole_step;
    auto t = MakeTrainer(mlp, options);
    ASSERT_TRUE(t);
    for (int s = 0; s < 2; ++s) {
      REPRISE_ASSERT_OK(Feed(*t, s));
      REPRISE_ASSERT_OK(t->Step());
    }
    const auto before = ParameterValues(*t);
    REPRISE_ASSERT_OK(Feed(*t, 2, /*nan=*/true));
    REPRISE_ASSERT_OK(t->Step());
    EXPECT_EQ(ParameterValues(*t), before);  // Bit for bit: the update was skipped whole.
    REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, t->SkippedSteps());
    EXPECT_EQ(skipped, 1);
    const TrainerReport report = t->Report();
    ASSERT_TRUE(report.non_finite.has_value());
    EXPECT_EQ(report.non_finite->policy, "skip");
    EXPECT_EQ(report.non_finite->skipped_steps, 1);
    EXPECT_EQ(report.non_finite->steps_checked, 3);
    EXPECT_EQ(report.non_finite->first_non_finite_step, 2);
    EXPECT_EQ(report.stats.skipped_steps, 1);
    EXPECT_THAT(report.ToText(), HasSubstr("1 steps skipped for an inf or a NaN"));
    REPRISE_ASSERT_OK(Feed(*t, 3));
    REPRISE_ASSERT_OK(t->Step());
    const auto after = ParameterValues(*t);
    EXPECT_NE(after, before);
    EXPECT_FALSE(AnyNan(after));
    REPRISE_ASSERT_OK_AND_ASSIGN(float loss, t->Loss());
    EXPECT_TRUE(std::isfinite(loss));
  }
}

// The guard lives in the captured step: replay gives the eager (bulked) run's bits, the NaN step
// included, and Verify finds no difference through a NaN batch.
TEST(NonFiniteGuardGpuTest, ReplayGivesTheEagerBitsThroughANanStep) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  TrainOptions graph_options, bulked_options;
  graph_options.numerics.deterministic = bulked_options.numerics.deterministic = true;
  bulked_options.launch.mode = ExecMode::kBulked;
  auto graph = MakeTrainer(mlp, graph_options);
  auto bulked = MakeTrainer(mlp, bulked_options);
  ASSERT_TRUE(graph && bulked);
  for (int s = 0; s < 6; ++s) {
    for (Trainer* t : {graph.get(), bulked.get()}) {
      REPRISE_ASSERT_OK(Feed(*t, s, /*nan=*/s == 3));
      REPRISE_ASSERT_OK(t->Step());
    }
    EXPECT_EQ(ParameterValues(*graph), ParameterValues(*bulked)) << "step " << s;
  }
  EXPECT_EQ(*graph->SkippedSteps(), 1);
  EXPECT_EQ(*bulked->SkippedSteps(), 1);
  REPRISE_ASSERT_OK(Feed(*graph, 9, /*nan=*/true));
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult verified, graph->Verify(3));
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

// kStop: Step() queues without waiting; the next waiting call names the step and the NaN input,
// and so does every call after it; the weights stay those before the NaN step.
TEST(NonFiniteGuardGpuTest, StopReturnsAStatusNamingTheStepAndTheTensor) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  for (const bool whole_step : {true, false}) {
    SCOPED_TRACE(whole_step ? "whole step" : "per layer");
    TrainOptions options;
    options.numerics.non_finite.policy = NonFinitePolicy::kStop;
    options.kernels.whole_step = whole_step;
    auto t = MakeTrainer(mlp, options);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->stats().launches_per_step == 2, whole_step);  // Input copy + the whole step.
    REPRISE_ASSERT_OK(Feed(*t, 0));
    REPRISE_ASSERT_OK(t->Step());
    REPRISE_ASSERT_OK(t->Loss().status());
    const auto before = ParameterValues(*t);
    REPRISE_ASSERT_OK(Feed(*t, 1, /*nan=*/true));
    REPRISE_ASSERT_OK(t->Step());  // Queued: Step() does not wait to find out.
    const absl::Status stopped = t->Loss().status();
    EXPECT_EQ(stopped.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(stopped.message(), HasSubstr("step 1 "));
    EXPECT_THAT(stopped.message(), HasSubstr("'features'"));
    EXPECT_THAT(stopped.message(), HasSubstr("element 337 = nan"));
    EXPECT_EQ(t->Step(), stopped);
    EXPECT_EQ(t->Synchronize(), stopped);
    const TrainerReport report = t->Report();
    ASSERT_TRUE(report.non_finite.has_value());
    EXPECT_EQ(report.non_finite->stop, stopped.message());
    // The weights stay readable: those before the NaN step, which the stop kept.
    EXPECT_EQ(ParameterValues(*t), before);
  }
}

// kIgnore checks nothing: the NaN reaches the weights (the whole-step kernel runs then).
TEST(NonFiniteGuardGpuTest, IgnoreLetsTheNanIn) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  for (const bool whole_step : {true, false}) {
    SCOPED_TRACE(whole_step ? "whole step" : "per layer");
    TrainOptions options;
    options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
    options.kernels.whole_step = whole_step;
    auto t = MakeTrainer(mlp, options);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->stats().launches_per_step == 2, whole_step);  // Input copy + the whole step.
    REPRISE_ASSERT_OK(Feed(*t, 0, /*nan=*/true));
    REPRISE_ASSERT_OK(t->Step());
    EXPECT_TRUE(AnyNan(ParameterValues(*t)));
    REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, t->SkippedSteps());
    EXPECT_EQ(skipped, 0);
    EXPECT_FALSE(t->Report().non_finite.has_value());
  }
}

// The relu kernels keep a NaN, as torch.relu and the CPU reference do: unfused, a NaN feature
// makes the loss NaN.
TEST(NonFiniteGuardGpuTest, NanFeatureReachesTheLossThroughTheReluKernels) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  TrainOptions options;
  options.kernels.fuse = false;
  auto t = MakeTrainer(mlp, options);
  ASSERT_TRUE(t);
  REPRISE_ASSERT_OK(Feed(*t, 0, /*nan=*/true));
  REPRISE_ASSERT_OK(t->Step());
  REPRISE_ASSERT_OK_AND_ASSIGN(float loss, t->Loss());
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_EQ(*t->SkippedSteps(), 1);
}

// The default step of a small MLP is the whole-step kernel, guarded inside itself: still one
// launch, and the report says the guard checks it.
TEST(NonFiniteGuardGpuTest, TheDefaultWholeStepIsGuarded) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  auto t = Trainer::Create(mlp.graph, mlp.loss, {});
  REPRISE_ASSERT_OK(t.status());
  EXPECT_EQ((*t)->stats().launches_per_step, 2);  // Input copy + the whole step.
  const TrainerReport report = (*t)->Report();
  ASSERT_TRUE(report.non_finite.has_value());
  EXPECT_EQ(report.non_finite->policy, "skip");
  EXPECT_EQ(report.non_finite->checked_by, "the guard's check of the loss and gradients");
}

// The guard's counters are state tensors: a checkpoint keeps them.
TEST(NonFiniteGuardGpuTest, CheckpointKeepsTheCounters) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = SmallMlp();
  auto t = MakeTrainer(mlp, {});
  ASSERT_TRUE(t);
  REPRISE_ASSERT_OK(Feed(*t, 0, /*nan=*/true));
  REPRISE_ASSERT_OK(t->Step());
  REPRISE_ASSERT_OK(Feed(*t, 1));
  REPRISE_ASSERT_OK(t->Step());
  const std::string path = ::testing::TempDir() + "/non_finite_guard.ckpt";
  REPRISE_ASSERT_OK(t->SaveCheckpoint(path));
  auto restored = MakeTrainer(mlp, {});
  ASSERT_TRUE(restored);
  REPRISE_ASSERT_OK(restored->RestoreCheckpoint(path));
  REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, restored->SkippedSteps());
  EXPECT_EQ(skipped, 1);
  const TrainerReport report = restored->Report();
  ASSERT_TRUE(report.non_finite.has_value());
  EXPECT_EQ(report.non_finite->steps_checked, 2);
  EXPECT_EQ(report.non_finite->first_non_finite_step, 0);
}

}  // namespace
}  // namespace reprise
