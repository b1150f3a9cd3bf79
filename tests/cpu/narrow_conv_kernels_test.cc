// The narrow-convolution kernel generator without a GPU: which shapes it takes (and the reason it
// gives for the others), shared memory within a block's limit, and every kernel compiling with
// NVRTC for sm_90 in float32, bfloat16 and float16.
#include "src/codegen/narrow_conv_kernels.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/narrow_conv.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

codegen::NarrowConvShape Stem(DType dtype) {
  return {.n = 32,
          .h = 224,
          .w = 224,
          .c = 3,
          .k = 64,
          .r = 7,
          .s = 7,
          .stride_h = 2,
          .stride_w = 2,
          .pad_h = 3,
          .pad_w = 3,
          .p = 112,
          .q = 112,
          .dtype = dtype};
}

// Odd extents (partial tiles in both directions), one channel, stride 1, 3x3.
codegen::NarrowConvShape Odd(DType dtype) {
  return {.n = 3,
          .h = 19,
          .w = 21,
          .c = 1,
          .k = 16,
          .r = 3,
          .s = 3,
          .stride_h = 1,
          .stride_w = 1,
          .pad_h = 1,
          .pad_w = 1,
          .p = 19,
          .q = 21,
          .dtype = dtype};
}

TEST(NarrowConvKernelsTest, CompileForSm90InEveryElementType) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const codegen::NarrowConvShape& s : {Stem(dtype), Odd(dtype)}) {
      ASSERT_TRUE(codegen::NarrowConvSupports(s).ok()) << codegen::NarrowConvSupports(s);
      EXPECT_LE(codegen::NarrowConvForwardLaunch(s).shared_bytes, 113 * 1024);
      EXPECT_LE(codegen::NarrowConvWgradLaunch(s).shared_bytes, 113 * 1024);
      for (const codegen::GeneratedKernel& kernel :
           {codegen::NarrowConvForward(s), codegen::NarrowConvWgrad(s),
            codegen::NarrowConvWgradSum(s, 264)}) {
        auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
        ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
        EXPECT_FALSE(compiled->cubin.empty());
      }
    }
  }
}

TEST(NarrowConvKernelsTest, TilesCoverTheOutput) {
  // Forward tiles are 16 x 16 positions, weight-gradient tiles 8 x 16.
  EXPECT_EQ(codegen::NarrowConvForwardLaunch(Stem(DType::kFloat32)).tiles, 32 * 7 * 7);
  EXPECT_EQ(codegen::NarrowConvWgradLaunch(Stem(DType::kFloat32)).tiles, 32 * 14 * 7);
  EXPECT_EQ(codegen::NarrowConvForwardLaunch(Odd(DType::kFloat32)).tiles, 3 * 2 * 2);
  EXPECT_EQ(codegen::NarrowConvWgradLaunch(Odd(DType::kFloat32)).tiles, 3 * 3 * 2);
  // Partials: K x the taps padded to the MMA depth (147 -> 152 in TF32, 160 in 16 bits).
  EXPECT_EQ(codegen::NarrowConvWgradPartialFloats(Stem(DType::kFloat32), 2), 2 * 64 * 152);
  EXPECT_EQ(codegen::NarrowConvWgradPartialFloats(Stem(DType::kBFloat16), 2), 2 * 64 * 160);
}

TEST(NarrowConvKernelsTest, LimitsAreUnimplementedAndSayWhich) {
  auto reason = [](codegen::NarrowConvShape s) {
    absl::Status status = codegen::NarrowConvSupports(s);
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
    return std::string(status.message());
  };
  codegen::NarrowConvShape s = Stem(DType::kFloat32);
  s.c = 8;
  EXPECT_THAT(reason(s), HasSubstr("input channels"));
  s = Stem(DType::kFloat32);
  s.k = 72;
  EXPECT_THAT(reason(s), HasSubstr("output channels"));
  s = Stem(DType::kFloat32);
  s.r = s.s = 11;
  s.c = 4;
  EXPECT_THAT(reason(s), HasSubstr("taps"));
  s = Stem(DType::kFloat32);
  s.stride_h = 5;
  EXPECT_THAT(reason(s), HasSubstr("strides"));
  s = Stem(DType::kFloat32);
  s.pad_w = 7;
  EXPECT_THAT(reason(s), HasSubstr("pad"));
  s = Stem(DType::kFloat64);
  EXPECT_THAT(reason(s), HasSubstr("float32, bfloat16 or float16"));
}

TEST(NarrowConvKernelsTest, AppliesToNhwcDenseTf32Or16BitOnly) {
  runtime::ConvShape stem{.layout = Layout::kNHWC,
                          .dtype = DType::kFloat32,
                          .n = 32,
                          .c = 3,
                          .h = 224,
                          .w = 224,
                          .k = 64,
                          .r = 7,
                          .s = 7,
                          .p = 112,
                          .q = 112,
                          .stride_h = 2,
                          .stride_w = 2,
                          .pad_h = 3,
                          .pad_w = 3};
  EXPECT_TRUE(ops::NarrowConvApplies(stem, /*allow_tf32=*/true).ok());
  EXPECT_THAT(ops::NarrowConvApplies(stem, /*allow_tf32=*/false).message(), HasSubstr("TF32"));
  runtime::ConvShape bf16 = stem;
  bf16.dtype = DType::kBFloat16;
  EXPECT_TRUE(ops::NarrowConvApplies(bf16, /*allow_tf32=*/false).ok());
  runtime::ConvShape nchw = stem;
  nchw.layout = Layout::kNCHW;
  EXPECT_THAT(ops::NarrowConvApplies(nchw, true).message(), HasSubstr("NHWC"));
  runtime::ConvShape dilated = stem;
  dilated.dilation_h = 2;
  EXPECT_THAT(ops::NarrowConvApplies(dilated, true).message(), HasSubstr("dense"));
}

}  // namespace
}  // namespace reprise
