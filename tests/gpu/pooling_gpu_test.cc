// Max pooling, global average pooling, flatten and reshape on the GPU against the CPU reference,
// in both layouts. Max pooling and its gradient match bit for bit, ties included (the same scan,
// tie rule and summation order), as do the pooling that notes each window's argmax and the
// gradient from it; the averages within fp32 rounding.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

// x -> max_pool2d -> y, and (dy, x, y) -> max_pool2d_grad, on the GPU and the CPU; `ties` fills x
// with a few small integers so that most windows hold several maxima.
void CheckMaxPool(const PoolCase& k, bool ties) {
  Graph g;
  Value x =
      *g.AddParameter("x", {ImageShape(k.layout, 4, k.c, 11, 9)}, Initializer::Uniform(-1, 1));
  auto y = g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, PoolAttrs(k));
  ASSERT_TRUE(y.ok()) << y.status();
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

class MaxPoolGpuTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolGpuTest, MatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(GetParam(), /*ties=*/false);
}

TEST_P(MaxPoolGpuTest, TiesMatchCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckMaxPool(GetParam(), /*ties=*/true);
}

INSTANTIATE_TEST_SUITE_P(Windows, MaxPoolGpuTest,
                         ::testing::Values(PoolCase{Layout::kNCHW, 3, 3, 2, 2, 1, 1},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1},
                                           PoolCase{Layout::kNCHW, 2, 2, 2, 2, 0, 0},
                                           PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 8},
                                           PoolCase{Layout::kNHWC, 3, 3, 2, 2, 1, 1, 64},
                                           PoolCase{Layout::kNHWC, 3, 2, 1, 2, 1, 0, 12},
                                           PoolCase{Layout::kNHWC, 2, 2, 2, 2, 0, 0, 4}),
                         CaseName);

class GlobalAvgPoolGpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(GlobalAvgPoolGpuTest, PoolAndGradMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  const std::string name(LayoutName(layout));
  Graph g;
  Value small =
      *g.AddParameter("small", {ImageShape(layout, 4, 37, 7, 7)}, Initializer::Uniform(-1, 1));
  Value large =
      *g.AddParameter("large", {ImageShape(layout, 2, 3, 33, 35)}, Initializer::Uniform(-1, 1));
  Value dy = *g.AddConstant("dy", {Shape{4, 37}}, Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_small", {small}, {{"layout", name}}).ok());
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap_large", {large}, {{"layout", name}}).ok());
  ASSERT_TRUE(g.AddOp1(ops::GlobalAvgPoolGradOp(), "gap_grad", {dy},
                       {{"layout", name}, {"height", 7}, {"width", 7}})
                  .ok());
  ir::ReferenceExecutor cpu(g, false, 32);
  ExpectGpuMatchesCpu(g, cpu, 1e-5);  // fp32 sums of up to 1155 terms against double ones.
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, GlobalAvgPoolGpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

TEST(ReshapeGpuTest, FlattenAndReshapeCopyTheBytes) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddParameter("x", {Shape{6, 32, 3, 5}}, Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::FlattenOp(), "flatten", {x}).ok());
  ASSERT_TRUE(
      g.AddOp1(ops::ReshapeOp(), "reshape", {x}, {{"shape", std::string("6,480,1,1")}}).ok());
  ir::ReferenceExecutor cpu(g, false, 33);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

}  // namespace
}  // namespace reprise
