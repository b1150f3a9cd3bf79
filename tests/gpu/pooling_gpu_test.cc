// Max pooling, global average pooling, flatten and reshape on the GPU against the CPU reference,
// in both layouts, in float32 and bfloat16 (whose CPU reference widens to float32, runs the
// float32 reference and rounds each result to nearest even). Max pooling and its gradient match
// bit for bit, ties included (the same scan, tie rule and summation order: a dx element's window
// gradients are added in float in the reference's order before one rounding), as do the pooling
// that notes each window's argmax and the gradient from it, the average's gradient (one float
// division, rounded) and the copies. The averages are float sums against the reference's double
// sums: within fp32 rounding, or one bfloat16 rounding where the two sums straddle a boundary.
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

// bfloat16 keeps 8 significant bits: one rounding is at most 2^-8 relative. Where only a few
// elements land on a neighbouring value, a tensor's relative L2 error stays well below that.
constexpr double kOneBf16Rounding = 1.0 / 256;

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return std::string(DTypeName(info.param));
}

Shape ImageShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c};
}

struct PoolCase {
  Layout layout;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t c = 5;  // Channels; channels-last multiples of 4 take the 4-channels-per-thread kernels.
};

std::string CaseName(const PoolCase& k) {
  return absl::StrCat(LayoutName(k.layout), "_k", k.kh, "x", k.kw, "_s", k.sh, "x", k.sw, "_p",
                      k.ph, "x", k.pw, "_c", k.c);
}

Attrs PoolAttrs(const PoolCase& k) {
  return {{"kernel_h", k.kh},
          {"kernel_w", k.kw},
          {"stride_h", k.sh},
          {"stride_w", k.sw},
          {"pad_h", k.ph},
          {"pad_w", k.pw},
          {"layout", std::string(LayoutName(k.layout))}};
}

// x -> max_pool2d -> y, and (dy, x, y) -> max_pool2d_grad, on the GPU and the CPU; `ties` fills x
// with a few small integers (exact in bfloat16) so that most windows hold several maxima. x is a
// constant, so that bfloat16 is allowed (parameters are float32 by rule).
void CheckMaxPool(const PoolCase& k, DType dtype, bool ties) {
  Graph g;
  Value x = *g.AddConstant("x", {ImageShape(k.layout, 4, k.c, 11, 9), dtype},
                           Initializer::Uniform(-1, 1));
  auto y = g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, PoolAttrs(k));
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(g.spec(*y).dtype, dtype);
  Value dy = *g.AddConstant("dy", g.spec(*y), Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradOp(), "pool_grad", {dy, x, *y}, PoolAttrs(k)).ok());
  // Channels-last multiples of 4: the forward pooling that notes the argmax too, and the gradient
  // that gathers from it (the argmax compared as the int32 words it packs).
  const bool four = k.layout == Layout::kNHWC && k.c % 4 == 0;
  if (four) {
    auto with_argmax = g.AddOp(ops::MaxPool2dWithArgmaxOp(), "with_argmax", {x}, PoolAttrs(k));
    ASSERT_TRUE(with_argmax.ok()) << with_argmax.status();
    ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "from_argmax",
                         {dy, (*with_argmax)[1], x}, PoolAttrs(k))
                    .ok());
  }
  ir::ReferenceExecutor cpu(g, false, 31);
  if (ties) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> small(-2, 1);
    std::vector<double> values(g.spec(x).NumElements());
    for (double& v : values) v = small(rng);
    ASSERT_TRUE(cpu.SetLeaf("x", values).ok());
  }
  std::vector<std::string> ran;
  ExpectGpuMatchesCpu(g, cpu, 0.0, {}, /*deterministic=*/false, /*allow_tf32=*/false, &ran);
  // Channels-last multiples of 4 take the two-pass gradient (argmax, then gather).
  EXPECT_EQ(absl::StrContains(absl::StrJoin(ran, "; "), "reprise_max_pool2d_argmax_nhwc4"), four);
}

class MaxPoolGpuTest : public ::testing::TestWithParam<std::tuple<PoolCase, DType>> {};

TEST_P(MaxPoolGpuTest, MatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(std::get<0>(GetParam()), std::get<1>(GetParam()), /*ties=*/false);
}

TEST_P(MaxPoolGpuTest, TiesMatchCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(std::get<0>(GetParam()), std::get<1>(GetParam()), /*ties=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Windows, MaxPoolGpuTest,
    ::testing::Combine(::testing::Values(PoolCase{Layout::kNCHW, 3, 3, 2, 2, 1, 1},
                                         PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1},
                                         PoolCase{Layout::kNCHW, 2, 2, 2, 2, 0, 0},
                                         PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0},
                                         PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 8},
                                         PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 64},
                                         PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0, 12},
                                         PoolCase{Layout::kNHWC, 2, 2, 2, 2, 0, 0, 4}),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16)),
    [](const auto& info) {
      return absl::StrCat(CaseName(std::get<0>(info.param)), "_",
                          DTypeName(std::get<1>(info.param)));
    });

class GlobalAvgPoolGpuTest : public ::testing::TestWithParam<std::tuple<Layout, DType>> {};

TEST_P(GlobalAvgPoolGpuTest, PoolMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [layout, dtype] = GetParam();
  const std::string name(LayoutName(layout));
  Graph g;
  // Positive values: the mean stays away from zero, so a relative bound is meaningful.
  Value small = *g.AddConstant("small", {ImageShape(layout, 4, 37, 7, 7), dtype},
                               Initializer::Uniform(0.5, 1.5));
  Value large = *g.AddConstant("large", {ImageShape(layout, 2, 3, 33, 35), dtype},
                               Initializer::Uniform(0.5, 1.5));
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_small", {small}, {{"layout", name}}).ok());
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_large", {large}, {{"layout", name}}).ok());
  ir::ReferenceExecutor cpu(g, false, 32);
  // fp32 sums of up to 1155 terms against double ones; bfloat16 results rounded once more.
  ExpectGpuMatchesCpu(g, cpu, dtype == DType::kFloat32 ? 1e-5 : kOneBf16Rounding);
}

TEST_P(GlobalAvgPoolGpuTest, GradMatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  const auto [layout, dtype] = GetParam();
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{4, 37}, dtype}, Initializer::Uniform(-1, 1));
  auto dx = g.AddOp1(ops::GlobalAvgPoolGradOp(), "gap_grad", {dy},
                     {{"layout", std::string(LayoutName(layout))}, {"height", 7}, {"width", 5}});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(g.spec(*dx).dtype, dtype);
  ir::ReferenceExecutor cpu(g, false, 43);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndDtypes, GlobalAvgPoolGpuTest,
                         ::testing::Combine(::testing::Values(Layout::kNCHW, Layout::kNHWC),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const auto& info) {
                           return absl::StrCat(LayoutName(std::get<0>(info.param)), "_",
                                               DTypeName(std::get<1>(info.param)));
                         });

class ReshapeGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(ReshapeGpuTest, FlattenAndReshapeCopyTheBytes) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddConstant("x", {Shape{6, 32, 3, 5}, GetParam()}, Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::FlattenOp(), "flatten", {x}).ok());
  ASSERT_TRUE(
      g.AddOp1(ops::ReshapeOp(), "reshape", {x}, {{"shape", std::string("6,480,1,1")}}).ok());
  ir::ReferenceExecutor cpu(g, false, 33);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReshapeGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16), DTypeParamName);

}  // namespace
}  // namespace reprise
