// ResNet training on the GPU: graph replay gives the same bits as the bulked run over 50 steps
// (deterministic cuDNN algorithms), the loss falls, both layouts run, and the first steps match
// the CPU reference.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/template_images.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

constexpr int kBatch = 8, kSize = 64, kClasses = 4;  // 64: layer4 normalises over 2x2x8 values.

models::ResNetConfig SmallResNet(Layout layout = Layout::kNCHW) {
  return {.depth = 18, .batch = kBatch, .classes = kClasses, .image_size = kSize, .layout = layout};
}

std::unique_ptr<Trainer> MakeTrainer(const models::ResNet& net, ExecMode mode, bool fuse = true,
                                     int lanes = 0) {
  TrainOptions options;
  options.mode = mode;
  options.fuse = fuse;
  options.lanes = lanes;
  options.deterministic = true;
  options.channels_last = ChannelsLast::kOff;  // NCHW runs NCHW: the planar batch norm is tested.
  options.sgd.learning_rate = 0.005f;
  options.seed = 42;
  auto trainer = Trainer::Create(net.graph, net.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Each class is a fixed random image template under noise.
class Data : public testing::TemplateImages {
 public:
  Data() : TemplateImages(kBatch, kSize, kClasses) {}
};

std::vector<float> Train(Trainer& t, int steps) {
  Data data;
  std::vector<float> x, losses;
  std::vector<int32_t> y;
  for (int s = 0; s < steps; ++s) {
    data.Next(x, y);
    EXPECT_TRUE(t.SetInput("images", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

TEST(ResNetGpuTest, GraphEqualsBulkedBitwiseOverFiftyStepsAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    SCOPED_TRACE(LayoutName(layout));
    auto net = models::BuildResNet(SmallResNet(layout));
    ASSERT_TRUE(net.ok()) << net.status();
    auto bulked = MakeTrainer(*net, ExecMode::kBulked);
    auto graph = MakeTrainer(*net, ExecMode::kGraph);
    ASSERT_TRUE(bulked && graph);
    const std::vector<float> bulked_losses = Train(*bulked, 50);
    const std::vector<float> graph_losses = Train(*graph, 50);
    EXPECT_EQ(bulked_losses, graph_losses);
    for (const std::string& name : graph->ParameterNames()) {
      EXPECT_EQ(*bulked->GetParameter(name), *graph->GetParameter(name)) << name;
    }
    float first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += graph_losses[i], last += graph_losses[45 + i];
    EXPECT_LT(last, 0.7f * first) << ::testing::PrintToString(graph_losses);
    EXPECT_EQ(graph->stats().graph_instantiations, 1);
    EXPECT_EQ(graph->stats().graph_replays, 50);
  }
}

class ResNetLayoutGpuTest : public ::testing::TestWithParam<std::tuple<Layout, bool, int>> {};

// Both layouts run our batch-norm kernels (NCHW through its planar view), fused with the residual
// add and ReLU. Each layout also unfused and on one lane, to tell a lowering from a fusion or a
// lane ordering.
TEST_P(ResNetLayoutGpuTest, FirstStepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [layout, fuse, lanes] = GetParam();
  auto net = models::BuildResNet(SmallResNet(layout));
  ASSERT_TRUE(net.ok());
  auto gpu = MakeTrainer(*net, ExecMode::kGraph, fuse, lanes);
  ASSERT_TRUE(gpu);
  auto training = autodiff::BuildTrainingGraph(net->graph, net->loss, {.learning_rate = 0.005f});
  ASSERT_TRUE(training.ok());
  ir::ReferenceExecutor cpu(training->graph, /*float64=*/false, /*seed=*/42);
  absl::flat_hash_map<std::string, std::vector<float>> initial;
  for (const std::string& name : gpu->ParameterNames()) initial[name] = *gpu->GetParameter(name);
  Data data;
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int s = 0; s < 2; ++s) {
    data.Next(x, y);
    ASSERT_TRUE(gpu->SetInput("images", x).ok());
    ASSERT_TRUE(gpu->SetInput("labels", y).ok());
    ASSERT_TRUE(gpu->Step().ok());
    ASSERT_TRUE(cpu.SetLeaf("images", std::vector<double>(x.begin(), x.end())).ok());
    ASSERT_TRUE(cpu.SetLeaf("labels", y).ok());
    ASSERT_TRUE(cpu.Run().ok());
    const float cpu_loss = (*cpu.Tensor(net->loss))->data<float>()[0];
    EXPECT_NEAR(*gpu->Loss(), cpu_loss, 1e-4f * std::max(1.0f, std::abs(cpu_loss))) << "step " << s;
    // After the first step each update is the step's gradient alone (scaled), so a difference
    // shows in the layer where it starts, before the next forward spreads it everywhere.
    SCOPED_TRACE(absl::StrCat("updates after step ", s));
    testing::ExpectUpdatesAgree(
        gpu->ParameterNames(), [&](const std::string& name) { return initial.at(name); },
        [&](const std::string& name) { return *gpu->GetParameter(name); },
        [&](const std::string& name) {
          auto c = (*cpu.Leaf(name))->data<float>();
          return std::vector<float>(c.begin(), c.end());
        });
  }
}

// The test name of one configuration: "NCHW", "NCHW_unfused", "NCHW_one_lane", ...
std::string ConfigName(const ::testing::TestParamInfo<std::tuple<Layout, bool, int>>& info) {
  const auto [layout, fuse, lanes] = info.param;
  return absl::StrCat(LayoutName(layout), fuse ? "" : "_unfused", lanes == 1 ? "_one_lane" : "");
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ResNetLayoutGpuTest,
                         ::testing::Values(std::make_tuple(Layout::kNCHW, true, 0),
                                           std::make_tuple(Layout::kNHWC, true, 0),
                                           std::make_tuple(Layout::kNCHW, false, 0),
                                           std::make_tuple(Layout::kNCHW, true, 1),
                                           std::make_tuple(Layout::kNHWC, false, 1)),
                         ConfigName);

}  // namespace
}  // namespace reprise
