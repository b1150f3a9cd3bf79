// conv2d_bn_train (src/ops/conv_bn.h) lowered on the GPU against its CPU reference (the conv and
// batch-norm references it replaces): the output, the saved statistics, the convolution's output
// and the running statistics it updates in place, with and without the ReLU and residual add, in
// both layouts, float32, bfloat16 and float16. The fused form (cuDNN's genstats epilogue) must run
// exactly where ops::ConvBatchNormStatsSupport says cuDNN has engines for it, float16 NHWC with
// channel counts that are multiples of 8; elsewhere the separate lowerings, described with why.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv_bn.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct ConvBnCase {
  std::string name;
  Layout layout;
  DType dtype;
  int64_t n, c, h, w, k, r, stride, pad;
  bool relu, residual;
  bool fused;  // cuDNN's fused form runs (else the separate lowerings).
};

void PrintTo(const ConvBnCase& c, std::ostream* os) { *os << c.name; }

class ConvBnGpuTest : public ::testing::TestWithParam<ConvBnCase> {};

TEST_P(ConvBnGpuTest, MatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const ConvBnCase& t = GetParam();
  const bool nhwc = t.layout == Layout::kNHWC;
  const int64_t p = (t.h + 2 * t.pad - t.r) / t.stride + 1,
                q = (t.w + 2 * t.pad - t.r) / t.stride + 1;
  const auto image = [&](int64_t c, int64_t h, int64_t w) {
    return TensorSpec{nhwc ? Shape{t.n, h, w, c} : Shape{t.n, c, h, w}, t.dtype};
  };
  Graph g;
  const Value x = *g.AddConstant("x", image(t.c, t.h, t.w), Initializer::Uniform(-1, 2));
  const Value w =
      *g.AddConstant("w", {nhwc ? Shape{t.k, t.r, t.r, t.c} : Shape{t.k, t.c, t.r, t.r}, t.dtype},
                     Initializer::Uniform(-0.5, 0.5));
  const Value gamma = *g.AddParameter("gamma", {Shape{t.k}}, Initializer::Uniform(0.5, 1.5));
  const Value beta = *g.AddParameter("beta", {Shape{t.k}}, Initializer::Uniform(-1, 1));
  const Value mean = *g.AddState("running_mean", {Shape{t.k}}, Initializer::Uniform(-1, 1));
  const Value var = *g.AddState("running_var", {Shape{t.k}}, Initializer::Uniform(0.5, 2));
  std::vector<Value> inputs = {x, w, gamma, beta, mean, var};
  if (t.residual) {
    inputs.push_back(*g.AddConstant("residual", image(t.k, p, q), Initializer::Uniform(-1, 1)));
  }
  const Attrs attrs = {{"layout", std::string(LayoutName(t.layout))},
                       {"stride_h", t.stride},
                       {"stride_w", t.stride},
                       {"pad_h", t.pad},
                       {"pad_w", t.pad},
                       {"epsilon", 1e-5},
                       {"momentum", 0.1},
                       {"relu", t.relu},
                       {"residual", t.residual}};
  auto out = g.AddOp(ops::Conv2dBatchNormTrainOp(), "conv_bn", inputs, attrs);
  ASSERT_TRUE(out.ok()) << out.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 11);
  std::vector<std::string> described;
  // float32: the two paths sum in other orders; 16 bits: outputs within about one ulp.
  ExpectGpuMatchesCpu(g, cpu, t.dtype == DType::kFloat32 ? 1e-4 : 1e-2, {}, false, false,
                      &described);
  // The step may describe other launches too (its input copy); the conv_bn node's line says
  // whether it ran fused or why not.
  const std::string all = absl::StrJoin(described, "; ");
  std::cout << t.name << ": " << all << "\n";
  auto starts = [&](absl::string_view prefix) {
    return std::any_of(described.begin(), described.end(),
                       [&](const std::string& d) { return absl::StartsWith(d, prefix); });
  };
  EXPECT_EQ(starts("cudnn graph conv fwd stats "), t.fused) << all;
  EXPECT_EQ(starts("unfused ("), !t.fused) << all;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvBnGpuTest,
    ::testing::Values(ConvBnCase{"NhwcF16", Layout::kNHWC, DType::kFloat16, 4, 64, 14, 14, 64, 3, 1,
                                 1, false, false, true},
                      ConvBnCase{"NhwcF16Relu", Layout::kNHWC, DType::kFloat16, 4, 64, 14, 14, 64,
                                 3, 1, 1, true, false, true},
                      ConvBnCase{"NhwcF16ResidualRelu", Layout::kNHWC, DType::kFloat16, 4, 64, 14,
                                 14, 64, 3, 1, 1, true, true, true},
                      ConvBnCase{"NhwcF161x1Stride2", Layout::kNHWC, DType::kFloat16, 4, 64, 28, 28,
                                 128, 1, 2, 0, false, false, true},
                      ConvBnCase{"NhwcF163x3Stride2Relu", Layout::kNHWC, DType::kFloat16, 4, 64, 28,
                                 28, 128, 3, 2, 1, true, false, true},
                      // Not fused: 12 input channels, bfloat16, float32, NCHW.
                      ConvBnCase{"NhwcF16Channels12", Layout::kNHWC, DType::kFloat16, 4, 12, 14, 14,
                                 16, 3, 1, 1, true, false, false},
                      ConvBnCase{"NhwcBf16", Layout::kNHWC, DType::kBFloat16, 4, 64, 14, 14, 64, 3,
                                 1, 1, false, false, false},
                      ConvBnCase{"NhwcBf16ResidualRelu", Layout::kNHWC, DType::kBFloat16, 4, 64, 14,
                                 14, 64, 3, 1, 1, true, true, false},
                      ConvBnCase{"NhwcF32Relu", Layout::kNHWC, DType::kFloat32, 4, 32, 14, 14, 32,
                                 3, 1, 1, true, false, false},
                      ConvBnCase{"NchwF32ResidualRelu", Layout::kNCHW, DType::kFloat32, 2, 16, 10,
                                 10, 16, 3, 1, 1, true, true, false},
                      ConvBnCase{"NchwF16Relu", Layout::kNCHW, DType::kFloat16, 2, 32, 10, 10, 32,
                                 3, 1, 1, true, false, false}),
    [](const ::testing::TestParamInfo<ConvBnCase>& info) { return info.param.name; });

}  // namespace
}  // namespace reprise
