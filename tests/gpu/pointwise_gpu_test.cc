// The pointwise ops of ResNet and MLP training, their bias gradients and the channel bias over
// bfloat16 tensors on the GPU against the CPU reference (which widens bfloat16 to float32, runs
// the float32 reference and rounds each result to nearest even).
//
// An elementwise op is one float operation and one rounding on both sides, so add, relu,
// relu_grad, bias_add and channel_bias_add match bit for bit. The sums (column_sum, channel_sum)
// add in float in another order than the reference (float rows in order, or double), so a sum may
// round to a neighbouring bfloat16 where the two straddle a rounding boundary.
#include <string>

#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

// Parameters are float32 by rule (mixed precision reads them through casts), so the bfloat16
// tensors here are constants.
constexpr DType kBf16 = DType::kBFloat16;

// bfloat16 keeps 8 significant bits: one rounding is at most 2^-8 relative. Where only a few
// elements land on a neighbouring value, a tensor's relative L2 error stays well below that.
constexpr double kOneRounding = 1.0 / 256;

Initializer Random() { return Initializer::Uniform(-1, 1); }

// Ragged extents: 75 rows are not a multiple of 32 row slices, 41 columns not of 32 columns.
TEST(PointwiseBf16GpuTest, ElementwiseOpsMatchCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value a = *g.AddConstant("a", {Shape{75, 41}, kBf16}, Random());
  Value b = *g.AddConstant("b", {Shape{75, 41}, kBf16}, Random());
  Value bias = *g.AddConstant("bias", {Shape{41}, kBf16}, Random());
  Value sum = *g.AddOp1(ops::AddOp(), "add", {a, b});
  Value biased = *g.AddOp1(ops::BiasAddOp(), "bias_add", {a, bias});
  Value y = *g.AddOp1(ops::ReluOp(), "relu", {sum});
  ASSERT_TRUE(g.AddOp1(ops::ReluGradOp(), "relu_grad", {b, y}).ok());
  for (const Value& v : {sum, biased, y}) ASSERT_EQ(g.spec(v).dtype, kBf16);
  ir::ReferenceExecutor cpu(g, false, 51);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

TEST(PointwiseBf16GpuTest, ColumnSumMatchesCpuReferenceWithinOneRounding) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{300, 41}, kBf16}, Random());
  Value db = *g.AddOp1(ops::ColumnSumOp(), "column_sum", {dy});
  ASSERT_EQ(g.spec(db).dtype, kBf16);
  ir::ReferenceExecutor cpu(g, false, 52);
  ExpectGpuMatchesCpu(g, cpu, kOneRounding);
}

class ChannelOpsBf16GpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ChannelOpsBf16GpuTest, ChannelBiasAddMatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  const Shape shape = layout == Layout::kNCHW ? Shape{3, 37, 9, 11} : Shape{3, 9, 11, 37};
  Graph g;
  Value x = *g.AddConstant("x", {shape, kBf16}, Random());
  Value bias = *g.AddConstant("bias", {Shape{37}, kBf16}, Random());
  auto y = g.AddOp1(ops::ChannelBiasAddOp(), "channel_bias_add", {x, bias},
                    {{"layout", std::string(LayoutName(layout))}});
  ASSERT_TRUE(y.ok()) << y.status();
  ir::ReferenceExecutor cpu(g, false, 53);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

TEST_P(ChannelOpsBf16GpuTest, ChannelSumMatchesCpuReferenceWithinOneRounding) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  const Shape shape = layout == Layout::kNCHW ? Shape{5, 37, 9, 11} : Shape{5, 9, 11, 37};
  Graph g;
  Value dy = *g.AddConstant("dy", {shape, kBf16}, Random());
  auto db = g.AddOp1(ops::ChannelSumOp(), "channel_sum", {dy},
                     {{"layout", std::string(LayoutName(layout))}});
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_EQ(g.spec(*db).dtype, kBf16);
  ir::ReferenceExecutor cpu(g, false, 54);
  ExpectGpuMatchesCpu(g, cpu, kOneRounding);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ChannelOpsBf16GpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace reprise
