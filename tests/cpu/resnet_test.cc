// BuildResNet: torchvision's architecture and names, clear errors, and a CPU training step that
// learns.
#include <random>

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

TEST(ResNetTest, BadConfigurationsAreClearErrors) {
  auto depth = models::BuildResNet({.depth = 20});
  EXPECT_EQ(depth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(depth.status().message(), HasSubstr("18, 34, 50, 101 or 152"));
  auto small = models::BuildResNet({.depth = 18, .image_size = 16});
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("image_size"));
  auto dtype = models::BuildResNet({.depth = 18, .dtype = DType::kInt32});
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kUnimplemented);
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
