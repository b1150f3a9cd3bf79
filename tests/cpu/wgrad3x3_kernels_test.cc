// The 3x3 weight-gradient kernels (src/codegen/wgrad3x3_kernels.h) on the CPU: they compile for
// sm_90, their split comes from the shape alone and covers every output row once, and shapes
// they do not handle are refused with the limit named. The GPU test checks their results.
#include "src/codegen/wgrad3x3_kernels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/wgrad3x3.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr codegen::Wgrad3x3Shape kLayer1{.n = 64, .h = 56, .w = 56, .c = 64, .k = 64};
constexpr codegen::Wgrad3x3Shape kLayer2{.n = 64, .h = 28, .w = 28, .c = 128, .k = 128};

TEST(Wgrad3x3KernelsTest, CompileForSm90) {
  for (const codegen::Wgrad3x3Shape& s : {kLayer1, kLayer2}) {
    ASSERT_TRUE(codegen::Wgrad3x3Supports(s).ok()) << codegen::Wgrad3x3Supports(s);
    EXPECT_LE(codegen::Wgrad3x3LaunchFor(s).shared_bytes, 113 * 1024);  // Two blocks per SM.
    for (const codegen::GeneratedKernel& kernel :
         {codegen::Wgrad3x3Tf32(s), codegen::Wgrad3x3Sum(s)}) {
      auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
      ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
      EXPECT_FALSE(compiled->cubin.empty());
    }
  }
}

TEST(Wgrad3x3KernelsTest, SplitsCoverEveryRowOnce) {
  // Layer1: 3 tiles (one k tile, one c tile, 3 filter rows), 88 splits of 41 rows (3,584 rows).
  const codegen::Wgrad3x3Launch l1 = codegen::Wgrad3x3LaunchFor(kLayer1);
  EXPECT_EQ(l1.rows_per_stage, 1);
  EXPECT_EQ(l1.splits, 88);
  EXPECT_EQ(l1.blocks, 3 * 88);
  EXPECT_EQ(l1.partial_floats, int64_t{3} * 88 * 64 * 192);
  // Layer2: 28 wide pads to 32 positions, two rows a stage; 12 tiles, 22 splits.
  const codegen::Wgrad3x3Launch l2 = codegen::Wgrad3x3LaunchFor(kLayer2);
  EXPECT_EQ(l2.rows_per_stage, 2);
  EXPECT_EQ(l2.blocks, 12 * l2.splits);
  for (const auto& [s, l] : {std::pair{kLayer1, l1}, std::pair{kLayer2, l2}}) {
    EXPECT_EQ(l.rows_per_split % l.rows_per_stage, 0);
    EXPECT_GE(int64_t{l.splits} * l.rows_per_split, s.n * s.h);
    EXPECT_LT(int64_t{l.splits - 1} * l.rows_per_split, s.n * s.h);  // No empty split.
  }
  // A small batch: no more splits than stages of rows.
  const codegen::Wgrad3x3Launch small =
      codegen::Wgrad3x3LaunchFor({.n = 2, .h = 28, .w = 28, .c = 64, .k = 64});
  EXPECT_EQ(small.rows_per_split, 2);
  EXPECT_EQ(small.splits, 28);
}

TEST(Wgrad3x3KernelsTest, RefusesWhatTheyDoNotHandle) {
  EXPECT_THAT(codegen::Wgrad3x3Supports({.n = 2, .h = 14, .w = 14, .c = 64, .k = 64}).message(),
              HasSubstr("28 to 64 wide, got 14"));
  EXPECT_THAT(codegen::Wgrad3x3Supports({.n = 2, .h = 56, .w = 56, .c = 48, .k = 64}).message(),
              HasSubstr("multiples of 64, got 48 in and 64 out"));
  runtime::ConvShape shape{.layout = Layout::kNHWC,
                           .dtype = DType::kFloat32,
                           .n = 2,
                           .c = 64,
                           .h = 56,
                           .w = 56,
                           .k = 64,
                           .r = 3,
                           .s = 3,
                           .p = 56,
                           .q = 56,
                           .pad_h = 1,
                           .pad_w = 1};
  EXPECT_TRUE(ops::Wgrad3x3Applies(shape, /*allow_tf32=*/true).ok());
  EXPECT_THAT(ops::Wgrad3x3Applies(shape, /*allow_tf32=*/false).message(), HasSubstr("TF32"));
  runtime::ConvShape strided = shape;
  strided.stride_h = strided.stride_w = 2;
  EXPECT_THAT(ops::Wgrad3x3Applies(strided, true).message(), HasSubstr("stride 1"));
  runtime::ConvShape planar = shape;
  planar.layout = Layout::kNCHW;
  EXPECT_THAT(ops::Wgrad3x3Applies(planar, true).message(), HasSubstr("NHWC"));
}

}  // namespace
}  // namespace reprise
