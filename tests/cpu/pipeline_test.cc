// The step compiler (src/passes/pipeline.h): reprise-dump prints the plan a Trainer runs, because
// both convert their options with CompileOptionsFor and compile with CompileStep.
#include "src/passes/pipeline.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/api/model_dump.h"
#include "src/passes/plan_dump.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

models::ResNetConfig SmallResNet50() {
  return {.depth = 50, .batch = 2, .classes = 10, .image_size = 32};
}

// What Trainer::Create compiles for `options` (src/api/trainer.cc, Trainer::Impl::Prepare), on a
// machine without a GPU: the whole-step kernel's default target.
std::string TrainerPlan(const TrainOptions& options) {
  absl::StatusOr<models::ResNet> net = models::BuildResNet(SmallResNet50());
  EXPECT_TRUE(net.ok()) << net.status();
  absl::StatusOr<passes::CompiledStep> step = passes::CompileStep(
      net->graph, net->loss, CompileOptionsFor(options, codegen::MlpStepTarget{}));
  EXPECT_TRUE(step.ok()) << step.status();
  absl::StatusOr<std::string> text = passes::DumpPlan(step->plan, passes::DumpFormat::kText);
  EXPECT_TRUE(text.ok()) << text.status();
  return *text;
}

TEST(CompileStepTest, DumpPrintsTheBf16ChannelsLastPlanATrainerRuns) {
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.kernels.channels_last = ChannelsLast::kOn;
  const std::string trainer = TrainerPlan(options);
  absl::StatusOr<std::string> dumped = DumpModel({.model = "resnet",
                                                  .resnet = SmallResNet50(),
                                                  .stage = "plan",
                                                  .dtype = "bf16",
                                                  .channels_last = "on"});
  ASSERT_TRUE(dumped.ok()) << dumped.status();
  EXPECT_EQ(*dumped, trainer);
  // The plan really is the mixed-precision channels-last one.
  EXPECT_THAT(trainer, HasSubstr("bf16"));
  EXPECT_THAT(trainer, HasSubstr("batch_norm_act_train"));
}

TEST(CompileStepTest, ADumpWithOtherOptionsPrintsAnotherPlan) {
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.kernels.channels_last = ChannelsLast::kOn;
  absl::StatusOr<std::string> float32 = DumpModel(
      {.model = "resnet", .resnet = SmallResNet50(), .stage = "plan", .channels_last = "on"});
  ASSERT_TRUE(float32.ok()) << float32.status();
  EXPECT_NE(*float32, TrainerPlan(options));
}

TEST(CompileStepTest, TrainOptionsOfMapsTheDumpFlags) {
  absl::StatusOr<TrainOptions> options = TrainOptionsOf(
      {.lanes = 3, .mirror = "auto", .dtype = "f16", .channels_last = "off", .tf32 = true});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->launch.lanes, 3);
  EXPECT_EQ(options->mirror.policy, MirrorOptions::Policy::kAuto);
  EXPECT_EQ(options->numerics.compute_dtype, DType::kFloat16);
  EXPECT_EQ(options->kernels.channels_last, ChannelsLast::kOff);
  EXPECT_TRUE(options->numerics.allow_tf32);
  EXPECT_THAT(TrainOptionsOf({.dtype = "f64"}).status().message(), HasSubstr("--dtype"));
  EXPECT_THAT(TrainOptionsOf({.channels_last = "maybe"}).status().message(),
              HasSubstr("--channels_last"));
}

TEST(CompileStepTest, LanesOutOfRangeAreRefusedNamingTheOption) {
  absl::StatusOr<models::Mlp> mlp = models::BuildMlp({});
  ASSERT_TRUE(mlp.ok());
  passes::CompileOptions options;
  options.plan.lanes = 9;
  EXPECT_THAT(passes::CompileStep(mlp->graph, mlp->loss, options).status().message(),
              HasSubstr("lanes"));
}

TEST(CompileStepTest, MixedPrecisionEnsemblesAreNotBatched) {
  absl::StatusOr<models::MlpEnsemble> ensemble = models::BuildMlpEnsemble(4, {});
  ASSERT_TRUE(ensemble.ok());
  passes::CompileOptions options;
  auto batched = passes::BuildTrainingStep(ensemble->graph, ensemble->loss, options);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_FALSE(batched->batched.groups.empty());
  options.compute_dtype = DType::kBFloat16;
  auto unbatched = passes::BuildTrainingStep(ensemble->graph, ensemble->loss, options);
  ASSERT_TRUE(unbatched.ok()) << unbatched.status();
  EXPECT_TRUE(unbatched->batched.groups.empty());
}

}  // namespace
}  // namespace reprise
