// The pointwise ops of ResNet and MLP training, their bias gradients and the channel bias on the
// GPU against the CPU reference, over float32 and bfloat16 tensors (the bfloat16 reference widens
// to float32, runs the float32 reference and rounds each result to nearest even).
//
// An elementwise op is one float operation and one rounding on both sides, so add, relu,
// relu_grad, bias_add and channel_bias_add match bit for bit in bfloat16. The sums (column_sum,
// channel_sum) add in float in another order than the reference (float rows in order, or double),
// so a bfloat16 sum may round to a neighbouring value where the two straddle a rounding boundary,
// and a float32 sum differs by a few of its own roundings.
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

// How far the GPU may be from the CPU reference (relative L2) for each dtype: elementwise ops
// and sums. bfloat16 keeps 8 significant bits, so one rounding is at most 2^-8 relative; where
// only a few elements land on a neighbouring value, a tensor's error stays well below that.
struct Tolerance {
  double elementwise, sum;
};
Tolerance ToleranceFor(DType dtype) {
  return dtype == DType::kBFloat16 ? Tolerance{0.0, 1.0 / 256} : Tolerance{1e-6, 1e-5};
}

Initializer Random() { return Initializer::Uniform(-1, 1); }

// Parameters are float32 by rule (mixed precision reads them through casts), so the tensors here
// are constants of the dtype under test.
class PointwiseGpuTest : public ::testing::TestWithParam<DType> {};

// Ragged extents: 75 rows are not a multiple of 32 row slices, 41 columns not of 32 columns.
TEST_P(PointwiseGpuTest, ElementwiseOpsMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  Graph g;
  Value a = *g.AddConstant("a", {Shape{75, 41}, dtype}, Random());
  Value b = *g.AddConstant("b", {Shape{75, 41}, dtype}, Random());
  Value bias = *g.AddConstant("bias", {Shape{41}, dtype}, Random());
  Value sum = *g.AddOp1(ops::AddOp(), "add", {a, b});
  Value biased = *g.AddOp1(ops::BiasAddOp(), "bias_add", {a, bias});
  Value y = *g.AddOp1(ops::ReluOp(), "relu", {sum});
  ASSERT_TRUE(g.AddOp1(ops::ReluGradOp(), "relu_grad", {b, y}).ok());
  for (const Value& v : {sum, biased, y}) ASSERT_EQ(g.spec(v).dtype, dtype);
  ir::ReferenceExecutor cpu(g, false, 51);
  ExpectGpuMatchesCpu(g, cpu, ToleranceFor(dtype).elementwise);
}

TEST_P(PointwiseGpuTest, ColumnSumMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{300, 41}, dtype}, Random());
  Value db = *g.AddOp1(ops::ColumnSumOp(), "column_sum", {dy});
  ASSERT_EQ(g.spec(db).dtype, dtype);
  ir::ReferenceExecutor cpu(g, false, 52);
  ExpectGpuMatchesCpu(g, cpu, ToleranceFor(dtype).sum);
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, PointwiseGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

class ChannelOpsGpuTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(ChannelOpsGpuTest, ChannelBiasAddMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, layout] = GetParam();
  const Shape shape = layout == Layout::kNCHW ? Shape{3, 37, 9, 11} : Shape{3, 9, 11, 37};
  Graph g;
  Value x = *g.AddConstant("x", {shape, dtype}, Random());
  Value bias = *g.AddConstant("bias", {Shape{37}, dtype}, Random());
  auto y = g.AddOp1(ops::ChannelBiasAddOp(), "channel_bias_add", {x, bias},
                    {{"layout", std::string(LayoutName(layout))}});
  ASSERT_TRUE(y.ok()) << y.status();
  ir::ReferenceExecutor cpu(g, false, 53);
  ExpectGpuMatchesCpu(g, cpu, ToleranceFor(dtype).elementwise);
}

TEST_P(ChannelOpsGpuTest, ChannelSumMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, layout] = GetParam();
  const Shape shape = layout == Layout::kNCHW ? Shape{5, 37, 9, 11} : Shape{5, 9, 11, 37};
  Graph g;
  Value dy = *g.AddConstant("dy", {shape, dtype}, Random());
  auto db = g.AddOp1(ops::ChannelSumOp(), "channel_sum", {dy},
                     {{"layout", std::string(LayoutName(layout))}});
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_EQ(g.spec(*db).dtype, dtype);
  ir::ReferenceExecutor cpu(g, false, 54);
  ExpectGpuMatchesCpu(g, cpu, ToleranceFor(dtype).sum);
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, ChannelOpsGpuTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               LayoutName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace reprise
