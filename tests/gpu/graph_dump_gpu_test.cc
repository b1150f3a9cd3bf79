// The captured CUDA graph of a step (the small MLP's, a small ResNet's on four lanes), read back:
// every launch of the plan accounted for, and every format of the dump written.
#include <algorithm>
#include <set>
#include <string>

#include "capture/graph_dump.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/api/captured_step_dump.h"
#include "src/api/model_dump.h"
#include "src/runtime/gather_list.h"
#include "src/util/graphviz.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr models::MlpConfig kSmallMlp = {
    .batch = 32, .input_features = 8, .depth = 2, .width = 8, .classes = 10};

// The captured graph of `step` accounts for every launch of its plan: at least one kernel node per
// compute launch (cuBLASLt and cuDNN may add more: a memset, a split-K reduction), every NVRTC
// kernel of the plan among the kernel nodes, and each node attributed exactly to its launch.
void ExpectEveryLaunchAccountedFor(const CapturedStepDump& step) {
  const capture::CudaGraphDump& g = step.graph;

  // The lowered launches are the input copy and then the plan's launches, in order.
  ASSERT_EQ(g.launches.size(), step.plan.launches.size() + 1);
  EXPECT_TRUE(g.launches[0].is_copy);
  EXPECT_GE(g.NumNodesOfType("kernel"), static_cast<int64_t>(step.plan.launches.size()));
  // The input copy: its small staged stretch as one memcpy node, or as the gather kernel.
  int64_t gather_kernels = 0;
  for (const capture::CudaGraphNode& n : g.nodes) {
    gather_kernels += n.node.kernel_name == runtime::kGatherKernelName;
  }
  EXPECT_EQ(g.NumNodesOfType("memcpy") + gather_kernels, 1);

  std::multiset<std::string> kernels;
  for (const capture::CudaGraphNode& n : g.nodes) {
    if (n.node.type == "kernel") kernels.insert(n.node.kernel_name);
  }
  int nvrtc_kernels = 0;
  for (const capture::LaunchSignature& launch : g.launches) {
    for (const std::string& name : launch.kernel_names) {
      ++nvrtc_kernels;
      EXPECT_TRUE(kernels.count(name) > 0) << name << " of '" << launch.node_name << "'";
    }
  }
  EXPECT_GT(nvrtc_kernels, 0);

  // Capture records where each launch ends, so every node, library ones included, is attributed
  // exactly, and each NVRTC kernel node to a launch that launches that kernel.
  for (const capture::CudaGraphNode& n : g.nodes) {
    ASSERT_EQ(n.origin.how, capture::Attribution::kExact) << n.node.kernel_name;
    const capture::LaunchSignature& launch = g.launches[n.origin.launch];
    if (!launch.kernel_names.empty()) {
      EXPECT_NE(
          std::find(launch.kernel_names.begin(), launch.kernel_names.end(), n.node.kernel_name),
          launch.kernel_names.end())
          << n.node.kernel_name << " attributed to '" << launch.node_name << "'";
    }
  }
  // Captured from one stream, the graph is a chain.
  bool one_lane = true;
  for (const capture::LaunchSignature& launch : g.launches) one_lane &= launch.lane == 0;
  if (one_lane) {
    EXPECT_EQ(g.edges.size(), g.nodes.size() - 1);
  }
}

class GraphDumpGpuTest : public ::testing::TestWithParam<bool> {};  // Parameter: fuse.

TEST_P(GraphDumpGpuTest, EveryComputeLaunchHasAKernelNodeAndEveryNvrtcKernelIsNamed) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Mlp mlp, models::BuildMlp(kSmallMlp));
  TrainOptions options;
  options.kernels.fuse = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(CapturedStepDump step,
                               CaptureStepForDump(mlp.graph, mlp.loss, options, false));
  ExpectEveryLaunchAccountedFor(step);
}

// A ResNet's step: cuDNN convolutions, our batch-norm kernels (three per launch) and several lanes.
TEST_P(GraphDumpGpuTest, ResNetStepOnFourLanesIsAccountedFor) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::ResNet net,
      models::BuildResNet(
          {.depth = 18, .batch = 2, .classes = 4, .image_size = 32, .layout = Layout::kNHWC}));
  TrainOptions options;
  options.kernels.fuse = GetParam();
  options.launch.lanes = 4;
  REPRISE_ASSERT_OK_AND_ASSIGN(CapturedStepDump step,
                               CaptureStepForDump(net.graph, net.loss, options, false));
  ExpectEveryLaunchAccountedFor(step);
  EXPECT_GT(step.plan.lanes(), 1);
}

TEST_P(GraphDumpGpuTest, EveryFormatIsWritten) {
  REPRISE_REQUIRE_GPU();
  DumpRequest request;
  request.mlp = kSmallMlp;
  request.stage = "cuda-graph";
  request.fuse = GetParam();
  request.format = "text";
  REPRISE_ASSERT_OK_AND_ASSIGN(std::string text, DumpModel(request));
  EXPECT_THAT(text, HasSubstr("cuda graph: "));
  EXPECT_THAT(text, HasSubstr("-> copy_inputs [exact]"));
  request.format = "json";
  REPRISE_ASSERT_OK_AND_ASSIGN(std::string json, DumpModel(request));
  EXPECT_THAT(json, HasSubstr("\"stage\": \"cuda-graph\""));
  EXPECT_THAT(json, HasSubstr("\"cuda_graph\": {"));
  request.format = "dot";
  REPRISE_ASSERT_OK_AND_ASSIGN(std::string dot, DumpModel(request));
  EXPECT_THAT(dot, HasSubstr("digraph cuda_graph {"));
  if (!util::FindDotProgram().empty()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::string svg, util::RenderSvg(dot));
    EXPECT_THAT(svg, HasSubstr("<svg"));
  }
  request.cuda_debug_dot = true;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::string cuda_dot, DumpModel(request));
  EXPECT_THAT(cuda_dot, HasSubstr("// reprise annotation"));
  EXPECT_THAT(cuda_dot, HasSubstr("digraph"));
}

INSTANTIATE_TEST_SUITE_P(FuseOnAndOff, GraphDumpGpuTest, ::testing::Bool());

}  // namespace
}  // namespace reprise
