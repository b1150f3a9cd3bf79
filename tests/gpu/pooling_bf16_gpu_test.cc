// Max pooling, global average pooling, flatten and reshape over bfloat16 tensors on the GPU
// against the CPU reference (which widens bfloat16 to float32, runs the float32 reference and
// rounds each result to nearest even), in both layouts.
//
// Max pooling and its gradient match bit for bit: the maximum is one of x's values, and the
// kernels add a dx element's window gradients in float in the reference's order before one
// rounding. So do the average's gradient (one float division, rounded) and the copies. The
// averages themselves are float sums against the reference's double sums: one may round to a
// neighbouring bfloat16 where the two sums straddle a rounding boundary.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
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

Shape ImageShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c};
}

struct PoolCase {
  Layout layout;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t c = 5;  // Channels; channels-last multiples of 4 take the 4-channels-per-thread kernels.
};

std::string CaseName(const ::testing::TestParamInfo<PoolCase>& info) {
  const PoolCase& k = info.param;
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

// x -> max_pool2d -> y, and (dy, x, y) -> max_pool2d_grad, all bfloat16; `ties` fills x with a
// few small integers (exact in bfloat16) so that most windows hold several maxima.
void CheckMaxPool(const PoolCase& k, bool ties) {
  Graph g;
  Value x = *g.AddConstant("x", {ImageShape(k.layout, 4, k.c, 11, 9), kBf16},
                           Initializer::Uniform(-1, 1));
  auto y = g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, PoolAttrs(k));
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(g.spec(*y).dtype, kBf16);
  Value dy = *g.AddConstant("dy", g.spec(*y), Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradOp(), "pool_grad", {dy, x, *y}, PoolAttrs(k)).ok());
  if (k.layout == Layout::kNHWC && k.c % 4 == 0) {  // The argmax forms, as in pooling_gpu_test.
    auto noted = g.AddOp(ops::MaxPool2dWithArgmaxOp(), "with_argmax", {x}, PoolAttrs(k));
    ASSERT_TRUE(noted.ok()) << noted.status();
    ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "from_argmax", {dy, (*noted)[1], x},
                         PoolAttrs(k))
                    .ok());
  }
  ir::ReferenceExecutor cpu(g, false, 41);
  if (ties) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> small(-2, 1);
    std::vector<double> values(g.spec(x).NumElements());
    for (double& v : values) v = small(rng);
    ASSERT_TRUE(cpu.SetLeaf("x", values).ok());
  }
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

class MaxPoolBf16GpuTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolBf16GpuTest, MatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(GetParam(), /*ties=*/false);
}

TEST_P(MaxPoolBf16GpuTest, TiesMatchCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(GetParam(), /*ties=*/true);
}

INSTANTIATE_TEST_SUITE_P(Windows, MaxPoolBf16GpuTest,
                         ::testing::Values(PoolCase{Layout::kNCHW, 3, 3, 2, 2, 1, 1},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1},
                                           PoolCase{Layout::kNCHW, 2, 2, 2, 2, 0, 0},
                                           PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 8},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 64},
                                           PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0, 12},
                                           PoolCase{Layout::kNHWC, 2, 2, 2, 2, 0, 0, 4}),
                         CaseName);

class GlobalAvgPoolBf16GpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(GlobalAvgPoolBf16GpuTest, PoolMatchesCpuReferenceWithinOneRounding) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  const std::string name(LayoutName(layout));
  Graph g;
  // Positive values: the mean stays away from zero, so a relative bound is meaningful.
  Value small = *g.AddConstant("small", {ImageShape(layout, 4, 37, 7, 7), kBf16},
                               Initializer::Uniform(0.5, 1.5));
  Value large = *g.AddConstant("large", {ImageShape(layout, 2, 3, 33, 35), kBf16},
                               Initializer::Uniform(0.5, 1.5));
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_small", {small}, {{"layout", name}}).ok());
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_large", {large}, {{"layout", name}}).ok());
  ir::ReferenceExecutor cpu(g, false, 42);
  ExpectGpuMatchesCpu(g, cpu, kOneRounding);
}

TEST_P(GlobalAvgPoolBf16GpuTest, GradMatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  const std::string name(LayoutName(GetParam()));
  Graph g;
  Value dy = *g.AddConstant("dy", {Shape{4, 37}, kBf16}, Initializer::Uniform(-1, 1));
  auto dx = g.AddOp1(ops::GlobalAvgPoolGradOp(), "gap_grad", {dy},
                     {{"layout", name}, {"height", 7}, {"width", 5}});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(g.spec(*dx).dtype, kBf16);
  ir::ReferenceExecutor cpu(g, false, 43);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, GlobalAvgPoolBf16GpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

TEST(ReshapeBf16GpuTest, FlattenAndReshapeCopyTheBytes) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddConstant("x", {Shape{6, 32, 3, 5}, kBf16}, Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::FlattenOp(), "flatten", {x}).ok());
  ASSERT_TRUE(
      g.AddOp1(ops::ReshapeOp(), "reshape", {x}, {{"shape", std::string("6,480,1,1")}}).ok());
  ir::ReferenceExecutor cpu(g, false, 44);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

}  // namespace
}  // namespace reprise
