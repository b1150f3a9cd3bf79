// BuildResNet: torchvision's architecture and names, clear errors, and a CPU training step that
// learns.
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// torchvision.models.resnet<depth>(num_classes=1000): sum(p.numel() for p in m.parameters()).
TEST(ResNetTest, ParameterCountsMatchTorchvision) {
  const std::pair<int, int64_t> expected[] = {
      {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
  for (const auto& [depth, count] : expected) {
    auto net = models::BuildResNet({.depth = depth, .batch = 1});
    ASSERT_TRUE(net.ok()) << net.status();
    EXPECT_EQ(net->graph.NumParameterElements(), count) << "ResNet-" << depth;
  }
}

TEST(ResNetTest, NamesFollowTorchvision) {
  auto net = models::BuildResNet({.depth = 50, .batch = 2, .image_size = 64});
  ASSERT_TRUE(net.ok()) << net.status();
  for (const char* name :
       {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "layer1.0.conv3.weight", "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight",
        "layer4.2.bn3.running_var", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(net->graph.FindNode(name).ok()) << name;
  }
  EXPECT_FALSE(net->graph.FindNode("layer1.1.downsample.0.weight").ok());
  EXPECT_EQ(net->graph.spec(net->logits).shape, (Shape{2, 1000}));
}

TEST(ResNetTest, NhwcHasTheSameParameterCountAndChannelsLastShapes) {
  auto net =
      models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32, .layout = Layout::kNHWC});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(net->graph.NumParameterElements(), 11689512);
  EXPECT_EQ(net->graph.spec(net->images).shape, (Shape{2, 32, 32, 3}));
  const Node& conv1 = net->graph.node(*net->graph.FindNode("conv1.weight"));
  EXPECT_EQ(conv1.outputs[0].shape, (Shape{64, 7, 7, 3}));
}

// MLPerf's stem: 4-channel images, a 4-channel conv1, every other parameter as before.
TEST(ResNetTest, FourChannelStemTakesPaddedImages) {
  auto net = models::BuildResNet(
      {.depth = 50, .batch = 2, .image_size = 64, .layout = Layout::kNHWC, .image_channels = 4});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(net->graph.spec(net->images).shape, (Shape{2, 64, 64, 4}));
  const Node& conv1 = net->graph.node(*net->graph.FindNode("conv1.weight"));
  EXPECT_EQ(conv1.outputs[0].shape, (Shape{64, 7, 7, 4}));
  EXPECT_EQ(net->graph.NumParameterElements(), 25557032 + 64 * 7 * 7);
  auto nchw = models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32, .image_channels = 4});
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  EXPECT_EQ(nchw->graph.spec(nchw->images).shape, (Shape{2, 4, 32, 32}));
}

// On images whose fourth channel is zero, the 4-channel stem trains exactly as the 3-channel one
// from the same weights (the CPU reference: the fourth channel's products are exact zeros, added
// after the others), whatever the fourth channel's weights hold.
TEST(ResNetTest, FourChannelStemTrainsAsThreeChannelsOnZeroPaddedImages) {
  constexpr int64_t kBatch = 2, kSize = 32, kPixels = kBatch * kSize * kSize;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  std::vector<double> x3(kPixels * 3), x4(kPixels * 4, 0.0);
  for (double& v : x3) v = normal(rng);
  for (int64_t p = 0; p < kPixels; ++p) {
    for (int c = 0; c < 3; ++c) x4[4 * p + c] = x3[3 * p + c];
  }
  struct Run {
    models::ResNet net;
    autodiff::TrainingGraph training;
    std::unique_ptr<ir::ReferenceExecutor> exec;
  };
  Run runs[2];
  for (int i = 0; i < 2; ++i) {
    auto net = models::BuildResNet({.depth = 18,
                                    .batch = kBatch,
                                    .classes = 3,
                                    .image_size = kSize,
                                    .layout = Layout::kNHWC,
                                    .image_channels = 3 + i});
    ASSERT_TRUE(net.ok()) << net.status();
    runs[i].net = *std::move(net);
    auto t =
        autodiff::BuildTrainingGraph(runs[i].net.graph, runs[i].net.loss, {.learning_rate = 0.01f});
    ASSERT_TRUE(t.ok()) << t.status();
    runs[i].training = *std::move(t);
    runs[i].exec = std::make_unique<ir::ReferenceExecutor>(runs[i].training.graph,
                                                           /*float64=*/false, /*seed=*/3);
  }
  // Every parameter and state of the 4-channel run from the 3-channel one's, conv1 widened with a
  // fourth input channel of 0.5.
  for (const Node& node : runs[0].net.graph.nodes()) {
    if (node.op_name() != "parameter" && node.op_name() != "state") continue;
    auto from = runs[0].exec->Leaf(node.name);
    ASSERT_TRUE(from.ok()) << from.status();
    const absl::Span<const float> v = (*from)->data<float>();
    std::vector<double> values(v.begin(), v.end());
    if (node.name == "conv1.weight") {
      std::vector<double> wide;
      for (size_t k = 0; k < values.size(); k += 3) {
        wide.insert(wide.end(), {values[k], values[k + 1], values[k + 2], 0.5});
      }
      values = std::move(wide);
    }
    ASSERT_TRUE(runs[1].exec->SetLeaf(node.name, values).ok()) << node.name;
  }
  std::vector<float> losses[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(runs[i].exec->SetLeaf("images", i == 0 ? x3 : x4).ok());
    ASSERT_TRUE(runs[i].exec->SetLeaf("labels", std::vector<int32_t>{0, 2}).ok());
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(runs[i].exec->Run().ok());
      losses[i].push_back((*runs[i].exec->Tensor(runs[i].net.loss))->data<float>()[0]);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  auto fourth = runs[1].exec->Leaf("conv1.weight");
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ((*fourth)->data<float>()[3], 0.5f) << "the zero channel's weight has no gradient";
}

TEST(ResNetTest, BadConfigurationsAreClearErrors) {
  auto depth = models::BuildResNet({.depth = 20});
  EXPECT_EQ(depth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(depth.status().message(), HasSubstr("18, 34, 50, 101 or 152"));
  auto small = models::BuildResNet({.depth = 18, .image_size = 16});
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("image_size"));
  auto dtype = models::BuildResNet({.depth = 18, .dtype = DType::kInt32});
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kUnimplemented);
  auto channels = models::BuildResNet({.depth = 18, .image_channels = 5});
  EXPECT_EQ(channels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(channels.status().message(), HasSubstr("image_channels=5"));
  auto bf16 = models::BuildResNet({.depth = 18, .dtype = DType::kBFloat16});
  EXPECT_EQ(bf16.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(bf16.status().message(), HasSubstr("TrainOptions::numerics.compute_dtype"));
}

// A few steps on one fixed batch: the CPU reference of the whole step (conv, batch norm, pooling,
// residual adds, their gradients and SGD) lowers the loss.
TEST(ResNetTest, CpuTrainingStepsLowerTheLossOnAFixedBatch) {
  auto net = models::BuildResNet({.depth = 18, .batch = 4, .classes = 3, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  auto t = autodiff::BuildTrainingGraph(net->graph, net->loss, {.learning_rate = 0.01f});
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, /*float64=*/false, /*seed=*/3);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  std::vector<double> x(4 * 3 * 32 * 32);
  for (double& v : x) v = normal(rng);
  ASSERT_TRUE(exec.SetLeaf("images", x).ok());
  ASSERT_TRUE(exec.SetLeaf("labels", std::vector<int32_t>{0, 1, 2, 1}).ok());
  std::vector<float> losses;
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(exec.Run().ok());
    losses.push_back((*exec.Tensor(net->loss))->data<float>()[0]);
  }
  EXPECT_LT(losses.back(), losses.front()) << ::testing::PrintToString(losses);
}

}  // namespace
}  // namespace reprise
