// The column sums (src/codegen/column_sum_kernels.h) on the GPU, in float32, bfloat16 and
// float16: column_sum, channels-last channel_sum and a fused pointwise chain with a column sum
// against the CPU reference, at shapes that split the rows over many blocks (with partial sums
// and a finalize launch) and that do not, with rows that are not a multiple of a block's and
// columns that are not a multiple of four (the element-by-element path); the fused chain's float32
// sum equal bit for bit to the unfused column_sum of its stored step; and two runs giving the same
// bits.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

Initializer Random() { return Initializer::Uniform(-1, 1); }

// Sums of thousands of values: float32 adds in another order than the reference (rows in order);
// a 16-bit result is one rounding (bfloat16: 2^-8 relative) from it, plus the partial sums' float
// error.
double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-4 : 1.0 / 256; }

std::string DescribedOf(const std::vector<std::string>& described, const std::string& what) {
  std::string out;
  for (const std::string& d : described) {
    if (absl::StrContains(d, what)) absl::StrAppend(&out, d, "\n");
  }
  return out;
}

struct Case {
  int64_t rows, cols;
  bool split;  // Whether the rows split over several row blocks (partial sums, a finalize).
};

class ColumnSumGpuTest : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

TEST_P(ColumnSumGpuTest, ColumnSumMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, c] = GetParam();
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{c.rows, c.cols}, dtype}, Random());
  ASSERT_TRUE(g.AddOp1(ops::ColumnSumOp(), "column_sum", {dy}).ok());
  ir::ReferenceExecutor cpu(g, false, 81);
  std::vector<std::string> described;
  ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype), {}, false, false, &described);
  EXPECT_EQ(absl::StrContains(DescribedOf(described, "reprise_column_sum"),
                              "reprise_column_sum_finalize"),
            c.split);
}

// Channels last: the bias gradient of a convolution is the column sum of [N·H·W, C].
TEST_P(ColumnSumGpuTest, ChannelsLastChannelSumMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, c] = GetParam();
  if (c.rows % 2 != 0) GTEST_SKIP() << "rows not of the form N·H·W with H = 2";
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{c.rows / 2, 2, 1, c.cols}, dtype}, Random());
  ASSERT_TRUE(g.AddOp1(ops::ChannelSumOp(), "channel_sum", {dy},
                       {{"layout", std::string(LayoutName(Layout::kNHWC))}})
                  .ok());
  ir::ReferenceExecutor cpu(g, false, 82);
  ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype));
}

// relu_grad(dy, y) -> bias_add(s0, bias) -> relu, storing steps 0 and 2 and summing step 0's
// columns; bias is a row input (loaded at the thread's columns).
ops::PointwiseProgram Chain() {
  ops::PointwiseProgram p;
  p.steps.push_back({&ops::ReluGradOp(), {0, 1}});
  p.steps.push_back({&ops::BiasAddOp(), {ops::PointwiseProgram::StepOperand(0), 2}});
  p.steps.push_back({&ops::ReluOp(), {ops::PointwiseProgram::StepOperand(1)}});
  p.outputs = {0, 2};
  p.column_sum = 0;
  return p;
}

TEST_P(ColumnSumGpuTest, FusedChainWithColumnSumMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, c] = GetParam();
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{c.rows, c.cols}, dtype}, Random());
  Value y = *g.AddConstant("y", {Shape{c.rows, c.cols}, dtype}, Random());
  Value bias = *g.AddConstant("bias", {Shape{c.cols}, dtype}, Random());
  auto out = g.AddOp(ops::FusedPointwiseOp(), "chain", {dy, y, bias}, Chain().ToAttrs());
  ASSERT_TRUE(out.ok()) << out.status();
  ir::ReferenceExecutor cpu(g, false, 83);
  std::vector<std::string> described;
  // Every step is one operation and one rounding on both sides (relu_grad and relu only select):
  // the stored steps match within a rounding, the sum as column_sum's.
  ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype), {}, false, false, &described);
  EXPECT_EQ(absl::StrContains(DescribedOf(described, "colsum"), "reprise_column_sum_finalize"),
            c.split);
}

// The fused chain's float32 column sum is the unfused column_sum of its stored step 0, bit for
// bit; and a second run gives the same bits as the first.
TEST_P(ColumnSumGpuTest, FusedSumEqualsUnfusedSumAndRunsRepeatBitwise) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, c] = GetParam();
  if (dtype != DType::kFloat32) GTEST_SKIP() << "16-bit: the unfused sum reads rounded values";
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{c.rows, c.cols}, dtype}, Random());
  Value y = *g.AddConstant("y", {Shape{c.rows, c.cols}, dtype}, Random());
  Value bias = *g.AddConstant("bias", {Shape{c.cols}, dtype}, Random());
  auto out = g.AddOp(ops::FusedPointwiseOp(), "chain", {dy, y, bias}, Chain().ToAttrs());
  ASSERT_TRUE(out.ok()) << out.status();
  Value unfused = *g.AddOp1(ops::ColumnSumOp(), "column_sum", {(*out)[0]});
  ir::ReferenceExecutor leaves(g, false, 84);
  const std::vector<Value> fetch = {(*out)[2], unfused, (*out)[0], (*out)[1]};
  auto first = RunOnGpu(g, leaves, fetch);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RunOnGpu(g, leaves, fetch);
  ASSERT_TRUE(second.ok()) << second.status();
  const ir::HostTensor &fused_sum = (*first)[0], &unfused_sum = (*first)[1];
  ASSERT_EQ(fused_sum.spec().bytes(), unfused_sum.spec().bytes());
  EXPECT_EQ(std::memcmp(fused_sum.raw(), unfused_sum.raw(), fused_sum.spec().bytes()), 0);
  for (size_t k = 0; k < fetch.size(); ++k) {
    EXPECT_EQ(std::memcmp((*first)[k].raw(), (*second)[k].raw(), (*first)[k].spec().bytes()), 0)
        << "fetch " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndShapes, ColumnSumGpuTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                       ::testing::Values(Case{200, 41, true},     // 6 row blocks, ragged columns.
                                         Case{4098, 768, true},   // GPT-2's width, ragged rows.
                                         Case{5000, 771, true},   // Columns not a multiple of 4.
                                         Case{2048, 3072, true},  // The MLP's first layer.
                                         Case{130, 8, true},      // 4 row blocks, the last short.
                                         Case{62, 41, false})),   // Too few rows to split (< 64).
    [](const auto& info) {
      const Case& c = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", c.rows, "x", c.cols);
    });

}  // namespace
}  // namespace reprise
