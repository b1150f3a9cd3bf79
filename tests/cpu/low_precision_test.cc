// bfloat16 and float16: host conversions round to nearest even, the cast op and its gradient, and
// the reference executor's float32 path for ops over 16-bit tensors.
#include "src/ir/low_precision.h"

#include <cmath>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/codegen/cast_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(LowPrecisionTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(ir::FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(ir::FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(ir::FloatToBFloat16(FromBits(0x3f808000)), 0x3f80);  // Tie, even below.
  EXPECT_EQ(ir::FloatToBFloat16(FromBits(0x3f818000)), 0x3f82);  // Tie, even above.
  EXPECT_EQ(ir::FloatToBFloat16(FromBits(0x3f808001)), 0x3f81);  // Past the tie.
  EXPECT_EQ(ir::FloatToBFloat16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(ir::BFloat16ToFloat(ir::FloatToBFloat16(NAN))));
  EXPECT_EQ(ir::FloatToBFloat16(FromBits(0x7f7fffff)), 0x7f80);  // Largest float rounds up to inf.
}

TEST(LowPrecisionTest, HalfRoundsToNearestEvenIncludingSubnormals) {
  EXPECT_EQ(ir::FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(ir::FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(ir::FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(ir::FloatToHalf(65519.0f), 0x7bff);  // Below the midpoint to 65536.
  EXPECT_EQ(ir::FloatToHalf(65520.0f), 0x7c00);  // The midpoint ties to even: infinity.
  EXPECT_EQ(ir::FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(ir::FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // Tie to even (zero).
  EXPECT_EQ(ir::FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // Tie to even (two).
  EXPECT_EQ(ir::FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // Tie, even below.
  EXPECT_EQ(ir::FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(ir::FloatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(ir::FloatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(ir::HalfToFloat(ir::FloatToHalf(NAN))));
}

TEST(LowPrecisionTest, EveryFinite16BitValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float bf = ir::BFloat16ToFloat(bits);
    if (!std::isnan(bf)) EXPECT_EQ(ir::FloatToBFloat16(bf), bits) << std::hex << b;
    const float h = ir::HalfToFloat(bits);
    if (!std::isnan(h)) EXPECT_EQ(ir::FloatToHalf(h), bits) << std::hex << b;
  }
}

TEST(LowPrecisionTest, CastConvertsAndItsGradientCastsBack) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{2, 3}}, Initializer::Uniform(-2, 2));
  auto y = g.AddOp1(ops::CastOp(), "to_bf16", {x}, {{"dtype", std::string("bf16")}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).dtype, DType::kBFloat16);
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 1);
  ASSERT_TRUE(cpu.Run().ok());
  const ir::HostTensor& in = **cpu.Tensor(x);
  const ir::HostTensor& out = **cpu.Tensor(*y);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(out.data<uint16_t>()[i], ir::FloatToBFloat16(in.data<float>()[i]));
  }
  auto grads = ops::CastOp().grad(g, g.node(y->node), {*y}, {true});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(g.spec((*grads)[0]).dtype, DType::kFloat32);
  auto bad = g.AddOp1(ops::CastOp(), "bad", {x}, {{"dtype", std::string("i8")}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("f32, f64, bf16 or f16"));
}

// A matmul over bfloat16 tensors: the product of the bf16 values computed in float32, rounded.
TEST(LowPrecisionTest, ReferenceRunsSixteenBitOpsInFloat32AndRounds) {
  Graph g;
  Value a = *g.AddParameter("a", {Shape{3, 4}}, Initializer::Uniform(-1, 1));
  Value b = *g.AddParameter("b", {Shape{4, 2}}, Initializer::Uniform(-1, 1));
  Value a16 = *g.AddOp1(ops::CastOp(), "a16", {a}, {{"dtype", std::string("bf16")}});
  Value b16 = *g.AddOp1(ops::CastOp(), "b16", {b}, {{"dtype", std::string("bf16")}});
  Value c = *g.AddOp1(ops::MatmulOp(), "c", {a16, b16});
  ASSERT_EQ(g.spec(c).dtype, DType::kBFloat16);
  ir::ReferenceExecutor cpu(g, false, 2);
  ASSERT_TRUE(cpu.Run().ok());
  const ir::HostTensor &A = **cpu.Tensor(a16), &B = **cpu.Tensor(b16), &C = **cpu.Tensor(c);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) {
      double sum = 0;
      for (int k = 0; k < 4; ++k)
        sum += ir::FloatElement(A, i * 4 + k) * ir::FloatElement(B, k * 2 + j);
      EXPECT_EQ(C.data<uint16_t>()[i * 2 + j], ir::FloatToBFloat16(static_cast<float>(sum)));
    }
  }
}

TEST(LowPrecisionTest, CastKernelCompilesForSm90) {
  auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(codegen::Cast()), "sm_90");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
}

}  // namespace
}  // namespace reprise
