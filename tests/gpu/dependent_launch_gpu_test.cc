// Programmatic dependent launch (TrainOptions::kernels.dependent_launch): our kernels launched so
// that each may be scheduled while the kernel ahead of it drains, every one of them waiting for its
// producers before it touches memory (src/codegen/grid_dependency.h). The captured step has
// programmatic edges where it is on and none of ours where it is off; a small GPT-2 in bfloat16 and
// ResNet-18 channels-last on two lanes train bit for bit as without it, launched from the host and
// from the device; and the captured step replays its eager run bit for bit.
#include <cuda_runtime_api.h>

#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/captured_step_dump.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/small_gpt2.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

bool GpuHasGridDependencyControl() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

absl::StatusOr<models::ResNet> SmallResNet() {
  return models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 4, .image_size = 32, .layout = Layout::kNHWC});
}

TEST(DependentLaunchGpuTest, TheCapturedStepHasProgrammaticEdgesOnlyWhenAsked) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::ResNet net, SmallResNet());
  for (const bool dependent : {true, false}) {
    TrainOptions options;
    options.numerics.compute_dtype = DType::kBFloat16;
    options.launch.lanes = 2;
    options.kernels.dependent_launch = dependent;
    REPRISE_ASSERT_OK_AND_ASSIGN(CapturedStepDump step,
                                 CaptureStepForDump(net.graph, net.loss, options, false));
    if (dependent && GpuHasGridDependencyControl()) {
      // Most of the step's kernels are ours (three per batch norm), most after another kernel.
      EXPECT_GT(step.graph.programmatic_edges, 40) << capture::CudaGraphToText(step.graph);
    } else {
      // None into our kernels. cuDNN launches some of its own as dependent launches whatever
      // the option says (its generated data gradient + sum kernels, which wait for their
      // producers themselves): the edges into those stay.
      for (const auto& [from, to] : step.graph.programmatic) {
        EXPECT_NE(step.graph.nodes[to].node.kernel_name.rfind("reprise_", 0), 0u)
            << "dependent_launch=" << dependent << ": " << from << " -> " << to << "\n"
            << capture::CudaGraphToText(step.graph);
      }
    }
  }
}

struct Case {
  const char* name;
  bool gpt2;  // Else ResNet-18.
  GraphLaunch launch;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class DependentLaunchTrainingGpuTest : public ::testing::TestWithParam<Case> {};

// Three steps of each trainer on the same batches: the losses after every step and the parameters
// at the end agree bit for bit.
TEST_P(DependentLaunchTrainingGpuTest, TrainsBitForBitAsWithoutIt) {
  REPRISE_REQUIRE_GPU();
  const Case& c = GetParam();
  Graph graph;
  Value loss;
  TrainOptions options;
  if (c.gpt2) {
    REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(testing::kSmallGpt2));
    graph = std::move(gpt.graph);
    loss = gpt.loss;
    options = testing::SmallGpt2Bf16AdamW();
  } else {
    REPRISE_ASSERT_OK_AND_ASSIGN(models::ResNet net, SmallResNet());
    graph = std::move(net.graph);
    loss = net.loss;
    options.seed = 42;
    options.numerics.compute_dtype = DType::kBFloat16;
    options.numerics.deterministic = true;
  }
  options.launch.mode = ExecMode::kGraph;
  options.launch.lanes = 2;
  options.launch.graph_launch = c.launch;
  options.kernels.dependent_launch = true;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> on, Trainer::Create(graph, loss, options));
  options.kernels.dependent_launch = false;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> off, Trainer::Create(graph, loss, options));
  std::mt19937 rng(11);
  for (int step = 0; step < 3; ++step) {
    for (Trainer* t : {on.get(), off.get()}) {
      if (c.gpt2) {
        std::vector<int32_t> tokens(testing::kSmallGpt2.batch * testing::kSmallGpt2.seq);
        std::mt19937 batch(static_cast<unsigned>(step));
        for (int32_t& token : tokens) token = static_cast<int32_t>(batch() % 512);
        ASSERT_TRUE(t->SetInput("tokens", tokens).ok());
        ASSERT_TRUE(t->SetInput("targets", tokens).ok());
      } else {
        std::vector<float> images(2 * 32 * 32 * 3);
        std::vector<int32_t> labels = {step % 4, (step + 1) % 4};
        std::mt19937 batch(static_cast<unsigned>(step));
        std::normal_distribution<float> pixel(0.0f, 1.0f);
        for (float& x : images) x = pixel(batch);
        ASSERT_TRUE(t->SetInput("images", images).ok());
        ASSERT_TRUE(t->SetInput("labels", labels).ok());
      }
      ASSERT_TRUE(t->Step().ok());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(float with, on->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(float without, off->Loss());
    ASSERT_EQ(with, without) << "step " << step;
  }
  EXPECT_EQ(testing::ParameterValues(*on), testing::ParameterValues(*off));
  EXPECT_EQ(on->stats().device_graph_launch, c.launch == GraphLaunch::kDevice);
}

INSTANTIATE_TEST_SUITE_P(Models, DependentLaunchTrainingGpuTest,
                         ::testing::Values(Case{"gpt2_host", true, GraphLaunch::kHost},
                                           Case{"gpt2_device", true, GraphLaunch::kDevice},
                                           Case{"resnet18_host", false, GraphLaunch::kHost},
                                           Case{"resnet18_device", false, GraphLaunch::kDevice}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DependentLaunchGpuTest, CapturedStepReplaysTheEagerStep) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(testing::kSmallGpt2));
  TrainOptions options = testing::SmallGpt2Bf16AdamW();
  options.launch.lanes = 2;
  options.kernels.dependent_launch = true;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                               Trainer::Create(gpt.graph, gpt.loss, options));
  std::vector<int32_t> tokens(testing::kSmallGpt2.batch * testing::kSmallGpt2.seq);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 13) % 512);
  ASSERT_TRUE(trainer->SetInput("tokens", tokens).ok());
  ASSERT_TRUE(trainer->SetInput("targets", tokens).ok());
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult result, trainer->Verify(3));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 3);
}

}  // namespace
}  // namespace reprise
