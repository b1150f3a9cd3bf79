// The non-finite guard inside the whole-step MLP kernels on the GPU (codegen::MlpGuard): a NaN in
// one input feature of a single MLP or of one model of a batched ensemble is skipped and counted,
// every weight unchanged bit for bit, and the next clean step trains; clean steps give the bits
// of the unguarded kernel (kIgnore) of the same schedule; kStop names the step. The single MLP's
// step also skips an inf feature and a gradient that alone overflows (its loss finite).
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
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
const models::MlpConfig kConfig{
    .batch = kBatch, .input_features = kFeatures, .depth = 2, .width = 128, .classes = 10};

// A trainer of `models` MLPs (1: a plain MLP), whole step.
std::unique_ptr<Trainer> Make(int models, TrainOptions options) {
  options.seed = 7;
  absl::StatusOr<std::unique_ptr<Trainer>> t;
  if (models == 1) {
    auto mlp = models::BuildMlp(kConfig);
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    if (!mlp.ok()) return nullptr;
    t = Trainer::Create(mlp->graph, mlp->loss, options);
  } else {
    auto ensemble = models::BuildMlpEnsemble(models, kConfig);
    EXPECT_TRUE(ensemble.ok()) << ensemble.status();
    if (!ensemble.ok()) return nullptr;
    t = Trainer::Create(ensemble->graph, ensemble->loss, options);
  }
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  // Input copies + the one whole-step launch.
  EXPECT_LE((*t)->stats().launches_per_step, 1 + 2 * models) << "not the whole step";
  return *std::move(t);
}

// Two trainers of the same models and initial weights: guarded (kSkipStep, the default) and not.
std::pair<std::unique_ptr<Trainer>, std::unique_ptr<Trainer>> MakeGuardedAndIgnored(int models,
                                                                                    bool tf32) {
  TrainOptions guarded_options, ignored_options;
  guarded_options.numerics.allow_tf32 = ignored_options.numerics.allow_tf32 = tf32;
  ignored_options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
  return {Make(models, guarded_options), Make(models, ignored_options)};
}

// Batch `step` for every model; with `nan`, model models - 1's row 5, feature 17 is a NaN.
absl::Status Feed(Trainer& t, int models, int step, bool nan = false) {
  for (int k = 0; k < models; ++k) {
    std::mt19937 rng(90 + 31 * step + k);
    std::normal_distribution<float> normal;
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> y(kBatch);
    for (int i = 0; i < kBatch; ++i)
      y[i] = static_cast<int32_t>((x[i * kFeatures] > 0) + 2 * (i % 4));
    if (nan && k == models - 1) x[5 * kFeatures + 17] = std::numeric_limits<float>::quiet_NaN();
    const std::string prefix = models == 1 ? "" : absl::StrCat("m", k, ".");
    RETURN_IF_ERROR(t.SetInput(prefix + "features", x));
    RETURN_IF_ERROR(t.SetInput(prefix + "labels", y));
  }
  return absl::OkStatus();
}

// The example in the whole-step kernel (1 model) and the batched one (4 models: layer
// phases; 32: the group schedule, which runs the guard too).
TEST(MlpStepGuardGpuTest, NanFeatureIsSkippedCountedAndTheNextStepTrains) {
  REPRISE_REQUIRE_GPU();
  for (int models : {1, 4, 32}) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(absl::StrCat(models, " models", tf32 ? ", TF32" : ""));
      TrainOptions options;
      options.numerics.allow_tf32 = tf32;
      auto t = Make(models, options);
      ASSERT_TRUE(t);
      for (int s = 0; s < 2; ++s) {
        REPRISE_ASSERT_OK(Feed(*t, models, s));
        REPRISE_ASSERT_OK(t->Step());
      }
      const auto before = ParameterValues(*t);
      REPRISE_ASSERT_OK(Feed(*t, models, 2, /*nan=*/true));
      REPRISE_ASSERT_OK(t->Step());
      EXPECT_EQ(ParameterValues(*t), before);  // Bit for bit: no block updated.
      REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, t->SkippedSteps());
      EXPECT_EQ(skipped, 1);
      const TrainerReport report = t->Report();
      ASSERT_TRUE(report.non_finite.has_value());
      EXPECT_EQ(report.non_finite->steps_checked, 3);
      EXPECT_EQ(report.non_finite->first_non_finite_step, 2);
      REPRISE_ASSERT_OK(Feed(*t, models, 3));
      REPRISE_ASSERT_OK(t->Step());
      const auto after = ParameterValues(*t);
      EXPECT_NE(after, before);
      EXPECT_FALSE(AnyNan(after));
      EXPECT_EQ(*t->SkippedSteps(), 1);
    }
  }
}

// Steps back to back with nothing read between them, two non-finite ones in the middle: each
// step's verdict is counted by the next step's kernel (MlpStepPlan::deferred_verdict), the last
// one's by the read after it. The weights are those of an unguarded trainer that ran only the
// clean steps, bit for bit, whatever the parity the skipped steps left.
TEST(MlpStepGuardGpuTest, SkippedStepsBetweenUnreadStepsAreCountedAndLeftOut) {
  REPRISE_REQUIRE_GPU();
  for (int models : {1, 4}) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(absl::StrCat(models, " models", tf32 ? ", TF32" : ""));
      auto [guarded, ignored] = MakeGuardedAndIgnored(models, tf32);
      ASSERT_TRUE(guarded && ignored);
      for (int s = 0; s < 7; ++s) {
        const bool nan = s == 2 || s == 3;
        REPRISE_ASSERT_OK(Feed(*guarded, models, s, nan));
        REPRISE_ASSERT_OK(guarded->Step());
        if (nan) continue;
        REPRISE_ASSERT_OK(Feed(*ignored, models, s));
        REPRISE_ASSERT_OK(ignored->Step());
      }
      REPRISE_ASSERT_OK_AND_ASSIGN(int64_t skipped, guarded->SkippedSteps());
      EXPECT_EQ(skipped, 2);
      TrainerReport report = guarded->Report();
      ASSERT_TRUE(report.non_finite.has_value());
      EXPECT_EQ(report.non_finite->steps_checked, 7);
      EXPECT_EQ(report.non_finite->first_non_finite_step, 2);
      EXPECT_EQ(ParameterValues(*guarded), ParameterValues(*ignored));
      // A skipped step last, read at once: its verdict is still pending when the read folds it.
      REPRISE_ASSERT_OK(Feed(*guarded, models, 7, /*nan=*/true));
      REPRISE_ASSERT_OK(guarded->Step());
      EXPECT_EQ(*guarded->SkippedSteps(), 3);
      report = guarded->Report();
      ASSERT_TRUE(report.non_finite.has_value());
      EXPECT_EQ(report.non_finite->steps_checked, 8);
      EXPECT_EQ(report.non_finite->first_non_finite_step, 2);
      EXPECT_EQ(ParameterValues(*guarded), ParameterValues(*ignored));
    }
  }
}

// kStop with steps queued after the non-finite one and nothing read between them: the step after
// it records it (its verdict deferred to the next step), and every later step is skipped.
TEST(MlpStepGuardGpuTest, StopWithUnreadStepsAfterItNamesTheStep) {
  REPRISE_REQUIRE_GPU();
  for (int models : {1, 4}) {
    SCOPED_TRACE(absl::StrCat(models, " models"));
    TrainOptions options;
    options.numerics.non_finite.policy = NonFinitePolicy::kStop;
    auto t = Make(models, options);
    ASSERT_TRUE(t);
    REPRISE_ASSERT_OK(Feed(*t, models, 0));
    REPRISE_ASSERT_OK(t->Step());
    const auto before = ParameterValues(*t);
    for (int s = 1; s < 5; ++s) {
      REPRISE_ASSERT_OK(Feed(*t, models, s, /*nan=*/s == 2));
      REPRISE_ASSERT_OK(t->Step());
    }
    const absl::Status stopped = t->Loss().status();
    EXPECT_EQ(stopped.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(stopped.message(), HasSubstr("step 2 "));
    // Steps 0 and 1 applied, 2 to 4 skipped: the weights of an unguarded run of steps 0 and 1.
    TrainOptions ignored_options;
    ignored_options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
    auto ignored = Make(models, ignored_options);
    ASSERT_TRUE(ignored);
    for (int s = 0; s < 2; ++s) {
      REPRISE_ASSERT_OK(Feed(*ignored, models, s));
      REPRISE_ASSERT_OK(ignored->Step());
    }
    const auto after = ParameterValues(*t);
    EXPECT_NE(after, before);
    EXPECT_EQ(after, ParameterValues(*ignored));
    const TrainerReport report = t->Report();
    ASSERT_TRUE(report.non_finite.has_value());
    EXPECT_EQ(report.non_finite->skipped_steps, 3);
    EXPECT_EQ(report.non_finite->steps_checked, 5);
  }
}

// Clean steps: the guarded kernel's bits are the unguarded one's (the same gradients, the same
// SGD arithmetic, only later), for the schedules both pick.
TEST(MlpStepGuardGpuTest, CleanStepsGiveTheUnguardedBits) {
  REPRISE_REQUIRE_GPU();
  for (int models : {1, 4}) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(absl::StrCat(models, " models", tf32 ? ", TF32" : ""));
      auto [guarded, ignored] = MakeGuardedAndIgnored(models, tf32);
      ASSERT_TRUE(guarded && ignored);
      for (int s = 0; s < 5; ++s) {
        for (Trainer* t : {guarded.get(), ignored.get()}) {
          REPRISE_ASSERT_OK(Feed(*t, models, s));
          REPRISE_ASSERT_OK(t->Step());
        }
        ASSERT_EQ(ParameterValues(*guarded), ParameterValues(*ignored)) << "step " << s;
        REPRISE_ASSERT_OK_AND_ASSIGN(float a, guarded->Loss());
        REPRISE_ASSERT_OK_AND_ASSIGN(float b, ignored->Loss());
        EXPECT_EQ(a, b);
      }
      EXPECT_EQ(*guarded->SkippedSteps(), 0);
    }
  }
}

// kStop in the batched kernel: the next waiting call names the step; every later step is skipped.
TEST(MlpStepGuardGpuTest, StopNamesTheStepInTheBatchedKernel) {
  REPRISE_REQUIRE_GPU();
  TrainOptions options;
  options.numerics.non_finite.policy = NonFinitePolicy::kStop;
  auto t = Make(4, options);
  ASSERT_TRUE(t);
  REPRISE_ASSERT_OK(Feed(*t, 4, 0));
  REPRISE_ASSERT_OK(t->Step());
  REPRISE_ASSERT_OK(t->Loss().status());
  const auto before = ParameterValues(*t);
  REPRISE_ASSERT_OK(Feed(*t, 4, 1, /*nan=*/true));
  REPRISE_ASSERT_OK(t->Step());
  const absl::Status stopped = t->Loss().status();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stopped.message(), HasSubstr("step 1 "));
  EXPECT_THAT(stopped.message(), HasSubstr("nan"));
  EXPECT_EQ(ParameterValues(*t), before);
}

// The single MLP's whole step with an inf feature: skipped and counted as the NaN is.
TEST(MlpStepGuardGpuTest, InfFeatureIsSkipped) {
  REPRISE_REQUIRE_GPU();
  for (bool tf32 : {false, true}) {
    SCOPED_TRACE(tf32 ? "TF32" : "f32");
    TrainOptions options;
    options.numerics.allow_tf32 = tf32;
    auto t = Make(1, options);
    ASSERT_TRUE(t);
    REPRISE_ASSERT_OK(Feed(*t, 1, 0));
    REPRISE_ASSERT_OK(t->Step());
    const auto before = ParameterValues(*t);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    x[9 * kFeatures + 4] = -std::numeric_limits<float>::infinity();
    REPRISE_ASSERT_OK(t->SetInput("features", x));
    REPRISE_ASSERT_OK(t->Step());
    EXPECT_EQ(ParameterValues(*t), before);
    EXPECT_EQ(*t->SkippedSteps(), 1);
  }
}

// A gradient alone non-finite, the loss finite: feature 11 is 1e38 in every row but layer 0's
// weights of it are 0 (the forward never sees it), and layer 1's weights are scaled by 1e6 (so
// layer 0's data gradient is large), so W_0's gradient of feature 11 overflows to inf. Guarded,
// the step is skipped and counted with its loss finite; unguarded, the inf reaches the weights
// (what makes this a gradient-only case).
TEST(MlpStepGuardGpuTest, OverflowingGradientWithAFiniteLossIsSkipped) {
  REPRISE_REQUIRE_GPU();
  for (NonFinitePolicy policy : {NonFinitePolicy::kSkipStep, NonFinitePolicy::kIgnore}) {
    const bool guarded = policy == NonFinitePolicy::kSkipStep;
    SCOPED_TRACE(guarded ? "guarded" : "ignored");
    TrainOptions options;
    options.numerics.non_finite.policy = policy;
    auto t = Make(1, options);
    ASSERT_TRUE(t);
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> w0, t->GetParameter("fc0.weight"));
    ASSERT_EQ(w0.size(), static_cast<size_t>(kConfig.width * kFeatures));
    for (int o = 0; o < kConfig.width; ++o) w0[o * kFeatures + 11] = 0.0f;
    REPRISE_ASSERT_OK(t->SetParameter("fc0.weight", w0));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> w1, t->GetParameter("fc1.weight"));
    for (float& v : w1) v *= 1e6f;
    REPRISE_ASSERT_OK(t->SetParameter("fc1.weight", w1));
    const auto before = ParameterValues(*t);
    std::mt19937 rng(4);
    std::normal_distribution<float> normal;
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    for (int r = 0; r < kBatch; ++r) x[r * kFeatures + 11] = 1e38f;
    std::vector<int32_t> y(kBatch);
    for (int i = 0; i < kBatch; ++i) y[i] = i % kConfig.classes;
    REPRISE_ASSERT_OK(t->SetInput("features", x));
    REPRISE_ASSERT_OK(t->SetInput("labels", y));
    REPRISE_ASSERT_OK(t->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(float loss, t->Loss());
    EXPECT_TRUE(std::isfinite(loss)) << loss;
    const auto after = ParameterValues(*t);
    if (guarded) {
      EXPECT_EQ(after, before);
      EXPECT_EQ(*t->SkippedSteps(), 1);
    } else {
      bool finite = true;
      for (float v : after.at("fc0.weight")) finite = finite && std::isfinite(v);
      EXPECT_FALSE(finite) << "W_0's gradient did not overflow: not a gradient-only case";
    }
  }
}

}  // namespace
}  // namespace reprise
