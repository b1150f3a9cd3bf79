// The non-finite guard's check in the SGD launch (TrainOptions::kernels.sgd_checks_in_launch): a
// per-layer MLP and a bfloat16 ResNet-18 (whose launch also writes the 16-bit copies) train bit
// for bit as with grad_nonfinite and loss_scale_check launched before the update, through clean
// steps, a NaN step (skipped whole and counted the same), and under kStop; captured replay gives
// the eager run's bits; and the step has two launches fewer.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/parameter_values.h"

namespace reprise {
namespace {

using ::reprise::testing::ParameterValues;

// A loss's bits: a skipped step's loss is a NaN, equal to the other's only bit for bit.
uint32_t Bits(const absl::StatusOr<float>& loss) {
  EXPECT_TRUE(loss.ok()) << loss.status();
  uint32_t bits = 0;
  if (loss.ok()) std::memcpy(&bits, &*loss, sizeof(bits));
  return bits;
}

constexpr int kBatch = 32, kFeatures = 64;

absl::Status Feed(Trainer& t, int step, bool nan) {
  std::mt19937 rng(90 + step);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * kFeatures);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(kBatch);
  for (int i = 0; i < kBatch; ++i)
    y[i] = static_cast<int32_t>((x[i * kFeatures] > 0) + 2 * (i % 3));
  if (nan) x[7 * kFeatures + 3] = std::numeric_limits<float>::quiet_NaN();
  RETURN_IF_ERROR(t.SetInput("features", x));
  return t.SetInput("labels", y);
}

TrainOptions MlpOptions(bool in_launch, NonFinitePolicy policy, ExecMode mode) {
  TrainOptions options;
  options.seed = 7;
  options.launch.mode = mode;
  options.kernels.whole_step = false;  // The per-layer step, whose SGD launch is the one checked.
  options.kernels.sgd_checks_in_launch = in_launch;
  options.numerics.non_finite.policy = policy;
  options.numerics.deterministic = true;
  return options;
}

std::unique_ptr<Trainer> Make(const Graph& g, Value loss, const TrainOptions& options) {
  auto t = Trainer::Create(g, loss, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(SgdChecksInLaunchGpuTest, MlpTrainsBitForBitAsWithTheCheckLaunchesThroughANanStep) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::Mlp mlp,
      models::BuildMlp(
          {.batch = kBatch, .input_features = kFeatures, .depth = 3, .width = 96, .classes = 6}));
  for (ExecMode mode : {ExecMode::kGraph, ExecMode::kBulked}) {
    SCOPED_TRACE(ExecModeName(mode));
    auto in_launch = Make(mlp.graph, mlp.loss, MlpOptions(true, NonFinitePolicy::kSkipStep, mode));
    auto apart = Make(mlp.graph, mlp.loss, MlpOptions(false, NonFinitePolicy::kSkipStep, mode));
    ASSERT_TRUE(in_launch && apart);
    // grad_nonfinite and loss_scale_check run inside the update's launch.
    EXPECT_EQ(in_launch->stats().launches_per_step + 2, apart->stats().launches_per_step);
    for (int s = 0; s < 7; ++s) {
      const bool nan = s == 2 || s == 5;
      const auto before = ParameterValues(*in_launch);
      for (Trainer* t : {in_launch.get(), apart.get()}) {
        REPRISE_ASSERT_OK(Feed(*t, s, nan));
        REPRISE_ASSERT_OK(t->Step());
      }
      ASSERT_EQ(ParameterValues(*in_launch), ParameterValues(*apart)) << "step " << s;
      if (nan) EXPECT_EQ(ParameterValues(*in_launch), before) << "step " << s;
      EXPECT_EQ(Bits(in_launch->Loss()), Bits(apart->Loss())) << "step " << s;
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, in_launch->SkippedSteps());
    EXPECT_EQ(skipped, 2);
    const TrainerReport report = in_launch->Report();
    ASSERT_TRUE(report.non_finite.has_value());
    EXPECT_EQ(report.non_finite->steps_checked, 7);
    EXPECT_EQ(report.non_finite->first_non_finite_step, 2);
  }
}

TEST(SgdChecksInLaunchGpuTest, ReplayGivesTheEagerBitsAndKStopStopsAtTheFirstNan) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::Mlp mlp,
      models::BuildMlp(
          {.batch = kBatch, .input_features = kFeatures, .depth = 2, .width = 80, .classes = 6}));
  auto graph =
      Make(mlp.graph, mlp.loss, MlpOptions(true, NonFinitePolicy::kSkipStep, ExecMode::kGraph));
  ASSERT_TRUE(graph);
  for (int s = 0; s < 4; ++s) {
    REPRISE_ASSERT_OK(Feed(*graph, s, s == 1));
    REPRISE_ASSERT_OK(graph->Step());
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult verified, graph->Verify(5));
  EXPECT_TRUE(verified.ok()) << verified.ToString();

  auto stop = Make(mlp.graph, mlp.loss, MlpOptions(true, NonFinitePolicy::kStop, ExecMode::kGraph));
  auto stop_apart =
      Make(mlp.graph, mlp.loss, MlpOptions(false, NonFinitePolicy::kStop, ExecMode::kGraph));
  ASSERT_TRUE(stop && stop_apart);
  for (int s = 0; s < 4; ++s) {
    for (Trainer* t : {stop.get(), stop_apart.get()}) {
      REPRISE_ASSERT_OK(Feed(*t, s, s == 1));
      (void)t->Step();  // A stopped trainer refuses later steps; the weights are compared below.
    }
  }
  const absl::Status stopped = stop->Loss().status();
  EXPECT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.message(), stop_apart->Loss().status().message());
  EXPECT_EQ(ParameterValues(*stop), ParameterValues(*stop_apart));
}

TEST(SgdChecksInLaunchGpuTest, ResNet18Bf16TrainsBitForBitAsWithTheCheckLaunches) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::ResNet net,
      models::BuildResNet(
          {.depth = 18, .batch = 2, .classes = 4, .image_size = 32, .layout = Layout::kNHWC}));
  std::unique_ptr<Trainer> trainers[2];
  for (int i = 0; i < 2; ++i) {
    TrainOptions options;
    options.seed = 42;
    options.numerics.compute_dtype = DType::kBFloat16;
    options.numerics.deterministic = true;
    options.launch.lanes = 2;
    options.kernels.sgd_checks_in_launch = i == 0;
    trainers[i] = Make(net.graph, net.loss, options);
    ASSERT_TRUE(trainers[i]);
  }
  for (int step = 0; step < 5; ++step) {
    for (auto& t : trainers) {
      std::vector<float> images(2 * 32 * 32 * 3);
      std::mt19937 batch(static_cast<unsigned>(step));
      std::normal_distribution<float> pixel(0.0f, 1.0f);
      for (float& x : images) x = pixel(batch);
      if (step == 3) images[100] = std::numeric_limits<float>::infinity();
      REPRISE_ASSERT_OK(t->SetInput("images", images));
      REPRISE_ASSERT_OK(t->SetInput("labels", std::vector<int32_t>{step % 4, (step + 1) % 4}));
      REPRISE_ASSERT_OK(t->Step());
    }
    ASSERT_EQ(Bits(trainers[0]->Loss()), Bits(trainers[1]->Loss())) << "step " << step;
  }
  EXPECT_EQ(ParameterValues(*trainers[0]), ParameterValues(*trainers[1]));
  EXPECT_EQ(*trainers[0]->SkippedSteps(), *trainers[1]->SkippedSteps());
  EXPECT_EQ(*trainers[0]->SkippedSteps(), 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult verified, trainers[0]->Verify(3));
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

}  // namespace
}  // namespace reprise
