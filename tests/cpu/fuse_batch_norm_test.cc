// The fuse pass on a ResNet in either layout: each batch norm that feeds a ReLU (directly or
// through the residual add) takes the add and the ReLU in, its gradient takes the ReLU's gradient
// (after a residual add in channels-last, reading 1-bit masks the forward keeps), and the fused
// step computes the same bits as the unfused one on the CPU reference.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/batch_norm_act.h"
#include "src/passes/fuse.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

class FuseBatchNormTest : public ::testing::TestWithParam<Layout> {};

TEST_P(FuseBatchNormTest, BatchNormsTakeTheirAddAndReluAndTheReluGradient) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  // The stem and two per basic block (its first, and its second with the residual add).
  EXPECT_EQ(counts.at("batch_norm_act_train"), 17);
  EXPECT_EQ(counts.at("batch_norm_act_grad"), 17);
  // The three downsample batch norms feed the add, not a ReLU: they stay as they are.
  EXPECT_EQ(counts.at("batch_norm_train"), 3);
  EXPECT_EQ(counts.at("batch_norm_grad"), 3);
  EXPECT_EQ(counts.count("relu"), 0u);
  EXPECT_EQ(counts.count("relu_grad"), 0u);
  // Where the ReLU follows the batch norm directly (the stem, each block's first), the gradient
  // takes the ReLU's mask from x and beta, so it does not read the ReLU's output; after the
  // residual add it reads the output as before.
  const Graph& g = fused->training.graph;
  int from_x = 0;
  for (const Node& n : g.nodes()) {
    if (n.op_name() != "batch_norm_act_grad" || !ir::BoolAttrOr(n.attrs, "relu_from_x", false)) {
      continue;
    }
    ++from_x;
    const Node& beta = g.node(n.inputs[1].node);
    EXPECT_EQ(beta.op_name(), "parameter") << n.name;
    EXPECT_TRUE(absl::EndsWith(beta.name, "bias") || absl::EndsWith(beta.name, "beta"))
        << beta.name;
  }
  EXPECT_EQ(from_x, 9);
  // After the residual add, channels-last with channels a multiple of 16 (every block here), the
  // forward keeps 1-bit masks and the gradient reads them instead of the ReLU's output.
  const int blocks = GetParam() == Layout::kNHWC ? 8 : 0;
  int keep_bits = 0, from_bits = 0;
  for (const Node& n : g.nodes()) {
    if (n.op_name() == "batch_norm_act_train" && ir::BoolAttrOr(n.attrs, "keep_bits", false)) {
      ++keep_bits;
      EXPECT_TRUE(ir::BoolAttrOr(n.attrs, "residual", false)) << n.name;
      ASSERT_EQ(n.outputs.size(), 4u) << n.name;
      EXPECT_EQ(n.outputs[3].dtype, DType::kInt32) << n.name;
      EXPECT_EQ(n.outputs[3].shape.dim(3) * 16, n.outputs[0].shape.dim(3)) << n.name;
    }
    if (n.op_name() == "batch_norm_act_grad" && ir::BoolAttrOr(n.attrs, "relu_from_bits", false)) {
      ++from_bits;
      const Node& forward = g.node(n.inputs[1].node);
      EXPECT_EQ(forward.op_name(), "batch_norm_act_train") << n.name;
      EXPECT_EQ(n.inputs[1].output, 3) << n.name;
    }
  }
  EXPECT_EQ(keep_bits, blocks);
  EXPECT_EQ(from_bits, blocks);
}

// FuseOptions::batch_norm_relu_bits off: every gradient after a residual add reads the ReLU's
// output, as before the masks.
TEST(FuseBatchNormBitsTest, OffKeepsReadingTheReluOutput) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(Layout::kNHWC);
  auto fused = passes::Fuse(t, {t.loss}, {.batch_norm_relu_bits = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  for (const Node& n : fused->training.graph.nodes()) {
    EXPECT_FALSE(ir::BoolAttrOr(n.attrs, "keep_bits", false)) << n.name;
    EXPECT_FALSE(ir::BoolAttrOr(n.attrs, "relu_from_bits", false)) << n.name;
  }
}

// Two steps on the CPU reference: the losses, and the parameters after them.
std::vector<double> LossesOf(const Graph& g, Value loss, bool float64,
                             std::map<std::string, std::vector<double>>* parameters) {
  return testing::SmallResNetReferenceLosses(g, loss, float64, 2, {"parameter"}, parameters);
}

TEST_P(FuseBatchNormTest, FusedStepsGiveTheSameBitsOnTheCpuReference) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  for (bool float64 : {false, true}) {
    std::map<std::string, std::vector<double>> plain_params, fused_params;
    EXPECT_EQ(LossesOf(t.graph, t.loss, float64, &plain_params),
              LossesOf(fused->training.graph, fused->training.loss, float64, &fused_params));
    EXPECT_EQ(plain_params, fused_params);
  }
}

// FuseOptions::batch_norm_grad_sums: a residual block's input gradient, conv1's data gradient +
// the skip's, is summed by the gradient of the ReLU and batch norm before the block (which
// writes its masked gradient for its own skip anyway), so no add and no in-place convolution
// remain, except where the pooling gradient reads the sum (the first block's input); and the
// step's bits on the CPU reference are the unfused step's.
TEST_P(FuseBatchNormTest, ResidualSumsRideInTheBatchNormGradients) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, {.batch_norm_grad_sums = true});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.count("add"), 0u);
  EXPECT_EQ(counts.at("conv2d_dgrad_accumulate"), 1);  // The sum the max pooling's gradient reads.
  int summed = 0;
  for (const Node& n : g.nodes()) {
    if (n.op_name() != "batch_norm_act_grad" || !ir::BoolAttrOr(n.attrs, "dy_addend", false)) {
      continue;
    }
    ++summed;
    EXPECT_TRUE(ir::BoolAttrOr(n.attrs, "masked_output", false)) << n.name;
    ASSERT_EQ(n.inputs.size(), 7u) << n.name;
    // One summand a data gradient, the other the next block's skip gradient (a masked gradient
    // or the downsample's data gradient).
    const std::string first(g.node(n.inputs[0].node).op_name());
    const std::string second(g.node(n.inputs[6].node).op_name());
    EXPECT_TRUE(first == "conv2d_dgrad" || second == "conv2d_dgrad") << first << " + " << second;
  }
  EXPECT_EQ(summed, 7);
  for (bool float64 : {false, true}) {
    std::map<std::string, std::vector<double>> plain_params, fused_params;
    EXPECT_EQ(LossesOf(t.graph, t.loss, float64, &plain_params),
              LossesOf(g, fused->training.loss, float64, &fused_params));
    EXPECT_EQ(plain_params, fused_params);
  }
}

// FuseOptions::batch_norm_grad_sums_min_elements: only the sums of at least that many elements
// ride in a batch-norm gradient; the smaller ones stay with their convolution (in place), and the
// bits stay the unfused step's.
TEST_P(FuseBatchNormTest, ResidualSumsBelowTheSizeStayWithTheirConvolution) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  // The batch-norm gradients' summed tensors with no threshold, by size.
  auto all = passes::Fuse(t, {t.loss}, {.batch_norm_grad_sums = true});
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<int64_t> sizes;
  for (const Node& n : all->training.graph.nodes()) {
    if (ir::BoolAttrOr(n.attrs, "dy_addend", false)) {
      sizes.push_back(all->training.graph.spec(n.inputs[0]).NumElements());
    }
  }
  ASSERT_EQ(sizes.size(), 7u);
  std::sort(sizes.begin(), sizes.end());
  ASSERT_LT(sizes.front(), sizes.back());  // Blocks of several sizes: the threshold splits them.
  const int64_t min_elements = sizes[3];
  const int want =
      static_cast<int>(sizes.end() - std::lower_bound(sizes.begin(), sizes.end(), min_elements));
  auto fused = passes::Fuse(
      t, {t.loss},
      {.batch_norm_grad_sums = true, .batch_norm_grad_sums_min_elements = min_elements});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  int summed = 0;
  for (const Node& n : g.nodes()) {
    if (ir::BoolAttrOr(n.attrs, "dy_addend", false)) {
      ++summed;
      EXPECT_GE(g.spec(n.inputs[0]).NumElements(), min_elements) << n.name;
    }
  }
  EXPECT_EQ(summed, want);
  // The pooling gradient's sum and every smaller one in place.
  EXPECT_EQ(OpCounts(g).at("conv2d_dgrad_accumulate"), 1 + 7 - want);
  EXPECT_EQ(OpCounts(g).count("add"), 0u);
  for (bool float64 : {false, true}) {
    std::map<std::string, std::vector<double>> plain_params, fused_params;
    EXPECT_EQ(LossesOf(t.graph, t.loss, float64, &plain_params),
              LossesOf(g, fused->training.loss, float64, &fused_params));
    EXPECT_EQ(plain_params, fused_params);
  }
}

// In mixed precision (bfloat16, the keep bits) too: three steps on the CPU reference give the bits
// of the sums as add nodes (stored in bfloat16, then read; the convolutions' in-place sums round
// once, not twice).
TEST(FuseBatchNormSumsTest, Bf16StepsHaveTheBitsOfTheUnfusedSums) {
  testing::ReferenceSteps steps[2];
  for (bool sums : {false, true}) {
    passes::CompileOptions options;
    options.compute_dtype = DType::kBFloat16;
    options.plan.lanes = 2;
    options.plan.fusion.batch_norm_grad_sums = sums;
    options.plan.fusion.conv_dgrad_accumulate = false;
    const passes::CompiledStep compiled = testing::CompileSmallResNet18(options);
    int summed = 0;
    for (const Node& n : compiled.plan.graph().nodes()) {
      summed += ir::BoolAttrOr(n.attrs, "dy_addend", false);
    }
    EXPECT_EQ(summed, sums ? 7 : 0);
    steps[sums] = testing::ThreeReferenceSteps(compiled);
  }
  EXPECT_EQ(steps[0].losses, steps[1].losses);
  EXPECT_EQ(steps[0].parameters, steps[1].parameters);
  EXPECT_NE(steps[1].losses[0], steps[1].losses[2]);  // It trained.
}

// The op refuses a second summand without the masked output its apply pass would read, and one
// of another spec.
TEST(BatchNormActGradSumTest, AddendNeedsTheMaskedOutputAndDySpec) {
  const TensorSpec data{Shape{2, 4, 4, 16}, DType::kFloat32};
  const TensorSpec channel{Shape{16}, DType::kFloat32};
  const std::vector<TensorSpec> in = {data, data, data, channel, channel, channel, data};
  Attrs attrs = {{"layout", std::string("NHWC")}, {"dy_addend", true}};
  auto no_mask = ops::BatchNormActGradOp().infer(attrs, in);
  ASSERT_FALSE(no_mask.ok());
  EXPECT_NE(no_mask.status().message().find("masked_output"), std::string::npos)
      << no_mask.status();
  attrs["masked_output"] = true;
  auto ok = ops::BatchNormActGradOp().infer(attrs, in);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 4u);
  std::vector<TensorSpec> other = in;
  other[6] = TensorSpec{Shape{2, 4, 4, 8}, DType::kFloat32};
  auto mismatch = ops::BatchNormActGradOp().infer(attrs, other);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("dy_addend"), std::string::npos) << mismatch.status();
  auto six = ops::BatchNormActGradOp().infer(attrs, absl::MakeConstSpan(in).subspan(0, 6));
  EXPECT_FALSE(six.ok());
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, FuseBatchNormTest,
                         ::testing::Values(Layout::kNHWC, Layout::kNCHW),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(LayoutName(info.param));
                         });

}  // namespace
}  // namespace reprise
