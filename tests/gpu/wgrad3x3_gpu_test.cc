// reprise's own 3x3 weight gradient (src/ops/wgrad3x3.h) against the CPU reference, TF32: at
// ResNet-50's layer1 width, and at a non-square image with two channel tiles each way; narrower
// images and strict float32 stay on cuDNN.
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

// conv2d_wgrad of x [n, h, w, c] and dy [n, h, w, k], 3x3, pad 1, stride 1, NHWC; returns what
// ran. TF32 operands carry 11 bits: relative L2 error 2e-3, as the other TF32 convolutions.
std::string CheckAgainstCpu(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k,
                            bool allow_tf32) {
  const Initializer random = Initializer::Uniform(-1, 1);
  Graph g;
  const Value x = *g.AddConstant("x", {Shape{n, h, w, c}}, random);
  const Value dy = *g.AddConstant("dy", {Shape{n, h, w, k}}, random);
  const Attrs attrs = {{"pad_h", int64_t{1}},           {"pad_w", int64_t{1}},
                       {"kernel_h", int64_t{3}},        {"kernel_w", int64_t{3}},
                       {"layout", std::string("NHWC")}, {"role", std::string("wgrad")}};
  auto dw = g.AddOp1(ops::Conv2dWgradOp(), "conv.wgrad", {x, dy}, attrs);
  EXPECT_TRUE(dw.ok()) << dw.status();
  ir::ReferenceExecutor cpu(g, false, 23);
  std::vector<std::string> described;
  ExpectGpuMatchesCpu(g, cpu, 2e-3, {}, /*deterministic=*/false, allow_tf32, &described);
  return absl::StrJoin(described, "; ");
}

TEST(Wgrad3x3GpuTest, Layer1WidthMatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  EXPECT_THAT(CheckAgainstCpu(2, 56, 56, 64, 64, true), HasSubstr("reprise_wgrad3x3_tf32"));
}

// 20 x 30: rows of 30 positions padded to 32, two rows a stage; 128 in, 192 out: 2 x 3 tiles.
TEST(Wgrad3x3GpuTest, NonSquareWithSeveralTilesMatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  EXPECT_THAT(CheckAgainstCpu(3, 20, 30, 128, 192, true), HasSubstr("reprise_wgrad3x3_tf32"));
}

TEST(Wgrad3x3GpuTest, NarrowImagesAndStrictFloat32StayOnCudnn) {
  REPRISE_REQUIRE_GPU();
  const std::string narrow = CheckAgainstCpu(2, 14, 14, 64, 64, true);
  EXPECT_THAT(narrow, Not(HasSubstr("wgrad3x3")));
  EXPECT_THAT(narrow, HasSubstr("cudnn"));
  const std::string strict = CheckAgainstCpu(1, 28, 28, 64, 64, false);
  EXPECT_THAT(strict, Not(HasSubstr("wgrad3x3")));
}

}  // namespace
}  // namespace reprise
