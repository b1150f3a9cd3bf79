// conv2d_dgrad_accumulate on the GPU (cuDNN's data gradient with beta = 1, written over its
// accumulator) and conv2d_dgrad_add (the same sum written apart, through cuDNN's graph API: its
// fused add where cuDNN has a plan, else its plain plan and our add kernel)
// against the CPU reference, in both layouts, strided and not, float32 and bfloat16. The
// trainer-level agreement (ResNets, whose residual blocks use them by default) is in the ResNet
// GPU tests.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct Case {
  std::string name, layout;
  int64_t stride;
  DType dtype;
  bool apart = false;  // conv2d_dgrad_add through the graph API, not conv2d_dgrad_accumulate.
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ConvDgradAccumulateGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvDgradAccumulateGpuTest, MatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  const Case& c = GetParam();
  const bool nhwc = c.layout == "NHWC";
  constexpr int64_t n = 4, ch = 16, k = 32, h = 14;
  const int64_t p = (h + 2 - 3) / c.stride + 1;
  const auto image = [&](int64_t channels, int64_t size) {
    return nhwc ? Shape{n, size, size, channels} : Shape{n, channels, size, size};
  };
  const Initializer random = Initializer::Uniform(-1, 1);
  Graph g;
  Value dy = *g.AddConstant("dy", {image(k, p), c.dtype}, random);
  Value w = *g.AddConstant("w", {nhwc ? Shape{k, 3, 3, ch} : Shape{k, ch, 3, 3}, c.dtype}, random);
  Value base = *g.AddConstant("base", {image(ch, h), c.dtype}, random);
  // A transient accumulator (the op writes over it), as a residual block's skip gradient is.
  auto acc = g.AddOp1(ops::ReluOp(), "skip", {base});
  ASSERT_TRUE(acc.ok()) << acc.status();
  const Attrs attrs = {{"stride_h", c.stride},
                       {"stride_w", c.stride},
                       {"pad_h", 1},
                       {"pad_w", 1},
                       {"dilation_h", 1},
                       {"dilation_w", 1},
                       {"groups", 1},
                       {"layout", c.layout},
                       {"input_h", h},
                       {"input_w", h},
                       {"role", std::string("dgrad")}};
  const ir::OpDef& op = c.apart ? ops::Conv2dDgradAddOp() : ops::Conv2dDgradAccumulateOp();
  auto sum = g.AddOp1(op, "dgrad+sum", {dy, w, *acc}, attrs);
  ASSERT_TRUE(sum.ok()) << sum.status();
  // In place the sum is transient too (the memory plan writes it over acc, so it cannot be kept):
  // it is compared through its double, which is exact. Apart, acc and the sum are kept as well.
  auto doubled = g.AddOp1(ops::AddOp(), "doubled", {*sum, *sum});
  ASSERT_TRUE(doubled.ok()) << doubled.status();
  ir::ReferenceExecutor cpu(g, false, 17);
  // Strict fp32 against the double-accumulated reference; bfloat16 within its rounding.
  std::vector<std::string> described;
  ExpectGpuMatchesCpu(
      g, cpu, c.dtype == DType::kFloat32 ? 1e-5 : 1e-2,
      c.apart ? absl::flat_hash_set<Value>{} : absl::flat_hash_set<Value>{*acc, *sum},
      /*deterministic=*/false, /*allow_tf32=*/false, &described,
      /*graph_conv_api=*/c.apart);
  const auto conv = std::find_if(described.begin(), described.end(), [](const std::string& d) {
    return d.find("conv") != std::string::npos;
  });
  ASSERT_NE(conv, described.end());
  std::cout << c.name << ": " << *conv << "\n";
  // Apart, no legacy call: cuDNN 9.19 has a fused plan for the channels-last sums (ResNet's, in
  // bfloat16 and strict float32) and none for NCHW in strict float32, where the plain plan runs
  // and our kernel adds (H100, 2026-12-06).
  if (c.apart) {
    EXPECT_EQ(conv->rfind("cudnn graph conv dgrad", 0), 0u) << *conv;
    const bool fused = nhwc;
    EXPECT_EQ(conv->find("cudnn graph conv dgrad acc") == 0, fused) << *conv;
    EXPECT_EQ(conv->find(" + add kernel (no fused add plan: ") != std::string::npos, !fused)
        << *conv;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvDgradAccumulateGpuTest,
    ::testing::Values(Case{"NchwF32", "NCHW", 1, DType::kFloat32},
                      Case{"NhwcF32", "NHWC", 1, DType::kFloat32},
                      Case{"NchwStride2F32", "NCHW", 2, DType::kFloat32},
                      Case{"NhwcStride2F32", "NHWC", 2, DType::kFloat32},
                      Case{"NhwcBf16", "NHWC", 1, DType::kBFloat16},
                      Case{"NhwcStride2Bf16", "NHWC", 2, DType::kBFloat16},
                      Case{"ApartNchwF32", "NCHW", 1, DType::kFloat32, true},
                      Case{"ApartNhwcStride2F32", "NHWC", 2, DType::kFloat32, true},
                      Case{"ApartNhwcBf16", "NHWC", 1, DType::kBFloat16, true},
                      Case{"ApartNhwcStride2Bf16", "NHWC", 2, DType::kBFloat16, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace reprise
