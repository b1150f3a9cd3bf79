// The narrow-convolution kernels (inputs of 1 to 4 channels: src/ops/narrow_conv.h) against the
// CPU reference, in float32 on TF32 tensor cores, bfloat16 and float16: the forward and the weight
// gradient at ResNet's stem and at shapes whose tiles are cut by the image's edges.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct NarrowCase {
  std::string name;
  int64_t n, c, h, w, k, r, s, stride, pad;
};

void PrintTo(const NarrowCase& c, std::ostream* os) { *os << c.name; }

int64_t OutSize(int64_t in, int64_t kernel, const NarrowCase& t) {
  return (in + 2 * t.pad - kernel) / t.stride + 1;
}

// Relative L2 error allowed: TF32 operands carry 11 bits; bfloat16 and float16 data are exact
// in the products and round once at the store.
double ToleranceFor(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return 4e-3;
    case DType::kFloat16:
      return 1e-3;
    default:
      return 2e-3;
  }
}

// conv2d and conv2d_wgrad of one shape, NHWC, each fed random leaves; returns what each launch ran.
std::vector<std::string> CheckAgainstCpu(const NarrowCase& t, DType dtype, bool allow_tf32) {
  const int64_t p = OutSize(t.h, t.r, t), q = OutSize(t.w, t.s, t);
  const Attrs attrs = {{"stride_h", t.stride},
                       {"stride_w", t.stride},
                       {"pad_h", t.pad},
                       {"pad_w", t.pad},
                       {"layout", std::string("NHWC")}};
  const Initializer random = Initializer::Uniform(-1, 1);
  Graph g;
  Value x = *g.AddConstant("x", {Shape{t.n, t.h, t.w, t.c}, dtype}, random);
  Value w = *g.AddConstant("w", {Shape{t.k, t.r, t.s, t.c}, dtype}, random);
  Value dy = *g.AddConstant("dy", {Shape{t.n, p, q, t.k}, dtype}, random);
  auto y = g.AddOp1(ops::Conv2dOp(), "conv", {x, w}, attrs);
  EXPECT_TRUE(y.ok()) << y.status();
  Attrs wgrad = attrs;
  wgrad["kernel_h"] = t.r;
  wgrad["kernel_w"] = t.s;
  wgrad["role"] = std::string("wgrad");
  EXPECT_TRUE(g.AddOp1(ops::Conv2dWgradOp(), "conv.wgrad", {x, dy}, wgrad).ok());
  ir::ReferenceExecutor cpu(g, false, 17);
  std::vector<std::string> described;
  ExpectGpuMatchesCpu(g, cpu, ToleranceFor(dtype), {}, /*deterministic=*/false, allow_tf32,
                      &described);
  return described;
}

class NarrowConvGpuTest : public ::testing::TestWithParam<NarrowCase> {};

TEST_P(NarrowConvGpuTest, MatchesCpuReferenceInEveryElementType) {
  REPRISE_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::string ran = absl::StrJoin(CheckAgainstCpu(GetParam(), dtype, true), "; ");
    EXPECT_THAT(ran, HasSubstr("reprise_narrow_conv_fwd"));
    EXPECT_THAT(ran, HasSubstr("reprise_narrow_conv_wgrad"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NarrowConvGpuTest,
    ::testing::Values(
        // ResNet's stem at 64x64 (32x32 outputs: two forward tiles across, four gradient tiles).
        NarrowCase{"Stem7x7Stride2", 2, 3, 64, 64, 64, 7, 7, 2, 3},
        // One channel, stride 1, outputs 19x21: every tile is cut at the bottom and the right.
        NarrowCase{"OneChannel3x3Odd", 3, 1, 19, 21, 16, 3, 3, 1, 1},
        // Four channels, 5x5 stride 2: 100 taps, 104 padded in TF32 and 112 in 16 bits.
        NarrowCase{"FourChannels5x5Stride2", 2, 4, 30, 27, 32, 5, 5, 2, 2},
        // Two channels, 4x4 stride 3 without padding, 48 output channels.
        NarrowCase{"TwoChannels4x4Stride3", 2, 2, 25, 31, 48, 4, 4, 3, 0}),
    [](const ::testing::TestParamInfo<NarrowCase>& info) { return info.param.name; });

// Strict float32 (no TF32) keeps cuDNN: the narrow kernels only run on tensor cores.
TEST(NarrowConvGpuTest, StrictFloat32StaysOnCudnn) {
  REPRISE_REQUIRE_GPU();
  const std::string ran = absl::StrJoin(
      CheckAgainstCpu({"Stem", 1, 3, 32, 32, 64, 7, 7, 2, 3}, DType::kFloat32, false), "; ");
  EXPECT_THAT(ran, Not(HasSubstr("narrow")));
  EXPECT_THAT(ran, HasSubstr("cudnn"));
}

}  // namespace
}  // namespace reprise
