// The fuse pass's conv + batch norm rule (FuseOptions::conv_batch_norm_stats) on a small ResNet-18:
// computing in float16 NHWC, where cuDNN has engines for the fusion, every convolution normalised
// by a training batch norm but the stem's (3 input channels) becomes one conv2d_bn_train node with
// that batch norm's add and ReLU, the backward is fused as before, and the fused step computes the
// same bits as the step fused without this rule on the CPU reference; in other dtypes and layouts
// the rule leaves them apart. Off by default.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/conv_bn.h"
#include "src/passes/fuse.h"
#include "src/passes/mixed_precision.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

// The training graph of a small ResNet-18 computing in `dtype` (16 bits through the
// mixed-precision pass).
autodiff::TrainingGraph SmallResNet18In(Layout layout, DType dtype) {
  if (dtype == DType::kFloat32) return testing::SmallResNet18Training(layout);
  auto net = models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 3, .image_size = 32, .layout = layout});
  EXPECT_TRUE(net.ok()) << net.status();
  auto mixed = passes::ConvertToMixedPrecision(net->graph, net->loss, {}, dtype);
  EXPECT_TRUE(mixed.ok()) << mixed.status();
  auto training = autodiff::BuildTrainingGraph(mixed->graph, mixed->loss, {.learning_rate = 0.05f});
  EXPECT_TRUE(training.ok()) << training.status();
  return *std::move(training);
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

passes::FuseOptions WithConvStats() {
  passes::FuseOptions options;
  options.conv_batch_norm_stats = true;
  return options;
}

TEST(FuseConvBatchNormTest, Float16NhwcConvolutionsTakeTheirBatchNormsAddsAndRelus) {
  const autodiff::TrainingGraph t = SmallResNet18In(Layout::kNHWC, DType::kFloat16);
  auto fused = passes::Fuse(t, {t.loss}, WithConvStats());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  // Two per basic block and the three downsampling shortcuts; the stem's 3 channels stay apart
  // (its batch norm and ReLU fused as without this rule).
  EXPECT_EQ(counts.at("conv2d_bn_train"), 19);
  EXPECT_EQ(counts.at("conv2d"), 1);
  EXPECT_EQ(counts.count("batch_norm_train"), 0u);
  EXPECT_EQ(counts.at("batch_norm_act_train"), 1);
  EXPECT_EQ(counts.count("relu"), 0u);
  // The backward is the batch-norm rule's as without this one.
  EXPECT_EQ(counts.at("batch_norm_act_grad"), 17);
  EXPECT_EQ(counts.at("batch_norm_grad"), 3);
  int with_relu = 0, with_residual = 0;
  for (const Node& n : fused->training.graph.nodes()) {
    if (n.op != &ops::Conv2dBatchNormTrainOp()) continue;
    with_relu += ir::BoolAttrOr(n.attrs, "relu", false);
    with_residual += ir::BoolAttrOr(n.attrs, "residual", false);
    EXPECT_EQ(n.inputs.size(), ir::BoolAttrOr(n.attrs, "residual", false) ? 7u : 6u) << n.name;
  }
  EXPECT_EQ(with_relu, 16);
  EXPECT_EQ(with_residual, 8);

  auto plain = passes::Fuse(t, {t.loss}, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(OpCounts(plain->training.graph).count("conv2d_bn_train"), 0u);
}

struct Unsupported {
  std::string name;
  Layout layout;
  DType dtype;
};

class FuseConvBatchNormElsewhereTest : public ::testing::TestWithParam<Unsupported> {};

// cuDNN has no engine for the fusion in these: the rule leaves every convolution apart.
TEST_P(FuseConvBatchNormElsewhereTest, LeavesConvolutionsApart) {
  const autodiff::TrainingGraph t = SmallResNet18In(GetParam().layout, GetParam().dtype);
  auto fused = passes::Fuse(t, {t.loss}, WithConvStats());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.count("conv2d_bn_train"), 0u);
  EXPECT_EQ(counts.at("conv2d"), 20);
}

INSTANTIATE_TEST_SUITE_P(DTypesAndLayouts, FuseConvBatchNormElsewhereTest,
                         ::testing::Values(Unsupported{"NchwF16", Layout::kNCHW, DType::kFloat16},
                                           Unsupported{"NhwcBf16", Layout::kNHWC, DType::kBFloat16},
                                           Unsupported{"NhwcF32", Layout::kNHWC, DType::kFloat32},
                                           Unsupported{"NchwF32", Layout::kNCHW, DType::kFloat32}),
                         [](const ::testing::TestParamInfo<Unsupported>& info) {
                           return info.param.name;
                         });

// Two steps on the CPU reference: the losses, and the parameters and the running statistics the
// fused nodes update in place after them.
std::vector<double> LossesOf(const Graph& g, Value loss, bool float64,
                             std::map<std::string, std::vector<double>>* state) {
  return testing::SmallResNetReferenceLosses(g, loss, float64, 2, {"parameter", "state"}, state);
}

TEST(FuseConvBatchNormTest, FusedStepsGiveTheSameBitsOnTheCpuReference) {
  const autodiff::TrainingGraph t = SmallResNet18In(Layout::kNHWC, DType::kFloat16);
  // Against the fuse pass's step without this rule: in 16 bits its batch norm + add + ReLU rounds
  // once, as conv2d_bn_train's does, where the unfused ops round after each.
  auto plain = passes::Fuse(t, {t.loss}, {});
  auto fused = passes::Fuse(t, {t.loss}, WithConvStats());
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::map<std::string, std::vector<double>> plain_state, fused_state;
  EXPECT_EQ(LossesOf(plain->training.graph, plain->training.loss, /*float64=*/false, &plain_state),
            LossesOf(fused->training.graph, fused->training.loss, /*float64=*/false, &fused_state));
  EXPECT_EQ(plain_state, fused_state);
}

}  // namespace
}  // namespace reprise
