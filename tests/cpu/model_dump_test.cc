// reprise-dump's library: each request the tool can make, and the clear error for each bad one
// (unknown model, stage or format; an option that does not fit; an output that cannot be written;
// svg without Graphviz; the cuda-graph stage without a GPU).
#include "src/api/model_dump.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/passes/plan_dump.h"
#include "src/runtime/device.h"
#include "src/util/graphviz.h"
#include "tests/cpu/dump_test_util.h"
#include "tests/cpu/json_reader.h"

namespace reprise {
namespace {

using ::reprise::testing::kSmallMlp;
using ::reprise::testing::MlpStages;
using ::reprise::testing::ScopedEnv;
using ::reprise::testing::SmallMlpStages;
using ::testing::HasSubstr;

DumpRequest SmallRequest(std::string stage, std::string format) {
  DumpRequest r;
  r.mlp = kSmallMlp;
  r.stage = std::move(stage);
  r.format = std::move(format);
  r.whole_step = false;  // These tests look at the per-layer fused groups.
  return r;
}

void ExpectError(const DumpRequest& request, absl::StatusCode code, absl::string_view text) {
  const absl::Status validated = ValidateDumpRequest(request);
  EXPECT_EQ(validated.code(), code) << validated;
  EXPECT_THAT(validated.message(), HasSubstr(text));
  EXPECT_EQ(DumpModel(request).status(), validated);  // DumpModel validates first.
}

TEST(ModelDumpTest, ParsesEveryStageByName) {
  for (DumpStage s :
       {DumpStage::kIr, DumpStage::kTraining, DumpStage::kPlan, DumpStage::kCudaGraph}) {
    auto parsed = ParseDumpStage(DumpStageName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
}

TEST(ModelDumpTest, TextOfEachHostStageIsTheStagesText) {
  const MlpStages s = SmallMlpStages();
  EXPECT_EQ(DumpModel(SmallRequest("ir", "text")).value(), s.mlp.graph.ToString());
  EXPECT_EQ(DumpModel(SmallRequest("training", "text")).value(), s.training.graph.ToString());
  EXPECT_EQ(DumpModel(SmallRequest("plan", "text")).value(), passes::PlanToString(s.plan));
  DumpRequest unfused = SmallRequest("plan", "text");
  unfused.fuse = false;
  EXPECT_EQ(DumpModel(unfused).value(), passes::PlanToString(SmallMlpStages(false).plan));
}

TEST(ModelDumpTest, EveryHostStageDumpsInJsonAndDot) {
  for (const char* stage : {"ir", "training", "plan"}) {
    SCOPED_TRACE(stage);
    auto json = DumpModel(SmallRequest(stage, "json"));
    ASSERT_TRUE(json.ok()) << json.status();
    auto parsed = testing::ParseJson(*json);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ((*parsed)["stage"].string, stage);
    EXPECT_EQ((*parsed)["parameter_count"].integer, 234);
    auto dot = DumpModel(SmallRequest(stage, "dot"));
    ASSERT_TRUE(dot.ok()) << dot.status();
    EXPECT_THAT(*dot, HasSubstr("digraph reprise {"));
  }
}

TEST(ModelDumpTest, UnknownModelStageAndFormatAreNamed) {
  DumpRequest model = SmallRequest("plan", "text");
  model.model = "transformer";
  ExpectError(model, absl::StatusCode::kInvalidArgument, "unknown --model 'transformer'");
  ExpectError(SmallRequest("lowered", "text"), absl::StatusCode::kInvalidArgument,
              "unknown --stage 'lowered': expected ir, training, plan or cuda-graph");
  ExpectError(SmallRequest("plan", "png"), absl::StatusCode::kInvalidArgument,
              "unknown --format 'png'");
}

// The options a Trainer would refuse are refused here too, by the same check.
TEST(ModelDumpTest, OptionsATrainerRefusesAreRefused) {
  DumpRequest r = SmallRequest("plan", "text");
  r.residual_sums_in_batch_norm = true;
  r.residual_sums_min_elements = -3;
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "TrainOptions::kernels.residual_sums_min_elements must be at least 0, got -3");
}

TEST(ModelDumpTest, ResNetPlanShowsConvolutionsBatchNormsAndTheirGradients) {
  DumpRequest r;
  r.model = "resnet";
  r.resnet = {.depth = 18, .batch = 2, .classes = 4, .image_size = 32};
  r.stage = "plan";
  r.format = "text";
  auto text = DumpModel(r);
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* expected :
       {"conv2d", "conv2d_dgrad", "conv2d_wgrad", "batch_norm_train", "batch_norm_grad",
        "max_pool2d", "global_avg_pool", "layer4.1.conv2.conv"}) {
    EXPECT_THAT(*text, HasSubstr(expected));
  }
}

// GPT-2 dumps as train_gpt2 trains it: AdamW (models::Gpt2AdamW), cuDNN's fused attention and
// the layer norms in the plan.
TEST(ModelDumpTest, Gpt2PlanTrainsWithAdamWAndFusedAttention) {
  DumpRequest r;
  r.model = "gpt2";
  r.gpt2 = {.batch = 2,
            .seq = 16,
            .max_positions = 16,
            .vocab = 96,
            .layers = 1,
            .heads = 2,
            .width = 32};
  r.dtype = "bf16";
  const absl::StatusOr<TrainOptions> options = TrainOptionsOf(r);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(options->optimizer.max_grad_norm, 1.0f);
  const absl::StatusOr<std::string> plan = DumpModel(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(*plan, HasSubstr("causal_attention"));
  EXPECT_THAT(*plan, HasSubstr("layer_norm"));
  EXPECT_THAT(*plan, HasSubstr("adam"));
  r.gpt2.heads = 3;  // Does not divide the width: the builder's message, naming the field.
  EXPECT_THAT(DumpModel(r).status().message(), HasSubstr("heads"));
}

TEST(ModelDumpTest, EnsemblePlanIsBatchedUnlessAskedNotTo) {
  DumpRequest r = SmallRequest("plan", "text");
  r.model = "ensemble";
  r.ensemble = 3;
  auto batched = DumpModel(r);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_THAT(*batched, HasSubstr("m*.fc0.matmul+bias+relu = batched_matmul_bias"));
  r.batch_ensembles = false;
  auto unbatched = DumpModel(r);
  ASSERT_TRUE(unbatched.ok()) << unbatched.status();
  EXPECT_THAT(*unbatched, HasSubstr("m2.fc0.matmul"));
  EXPECT_THAT(*unbatched, ::testing::Not(HasSubstr("batched_")));
  r.ensemble = 0;
  ExpectError(r, absl::StatusCode::kInvalidArgument, "--ensemble must be at least 1");
}

TEST(ModelDumpTest, UnwritableOutputIsNamed) {
  DumpRequest missing_dir = SmallRequest("plan", "json");
  missing_dir.output = "/nonexistent-reprise-test-dir/plan.json";
  ExpectError(missing_dir, absl::StatusCode::kInvalidArgument,
              "directory '/nonexistent-reprise-test-dir' does not exist");
  DumpRequest directory = SmallRequest("plan", "json");
  directory.output = ::testing::TempDir();
  ExpectError(directory, absl::StatusCode::kInvalidArgument, "is a directory");
}

TEST(ModelDumpTest, WritesTheDumpToTheOutputFile) {
  DumpRequest request = SmallRequest("ir", "json");
  request.output = ::testing::TempDir() + "/reprise_model_dump_test.json";
  ASSERT_TRUE(ValidateDumpRequest(request).ok());
  auto text = DumpModel(request);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_TRUE(WriteDump(request.output, *text).ok());
  std::ifstream in(request.output);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), *text);
  std::remove(request.output.c_str());
}

TEST(ModelDumpTest, SvgWithoutGraphvizIsAClearError) {
  ScopedEnv path("PATH", "/nonexistent-reprise-test-dir");
  ExpectError(SmallRequest("plan", "svg"), absl::StatusCode::kFailedPrecondition,
              "Graphviz 'dot' not found on PATH; use --format dot");
}

TEST(ModelDumpTest, SvgWithGraphvizIsRendered) {
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not on PATH";
  auto svg = DumpModel(SmallRequest("plan", "svg"));
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("<svg"));
}

TEST(ModelDumpTest, CudaDebugDotOnlyFitsTheCudaGraphStageInDot) {
  DumpRequest request = SmallRequest("plan", "dot");
  request.cuda_debug_dot = true;
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "--cuda_debug_dot needs --stage cuda-graph --format dot");
}

TEST(ModelDumpTest, CudaGraphStageWithoutAGpuIsAFailedPrecondition) {
  absl::StatusOr<int> devices = runtime::VisibleDeviceCount();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (*devices > 0) GTEST_SKIP() << "a GPU is visible; tests/gpu/graph_dump_gpu_test.cc covers it";
  ExpectError(SmallRequest("cuda-graph", "text"), absl::StatusCode::kFailedPrecondition,
              "--stage cuda-graph needs a CUDA device and none is visible");
}

}  // namespace
}  // namespace reprise
