// The channels-last batch-norm lowerings reject what they cannot run before touching the device:
// an element type other than float32 or bfloat16, bad sizes, missing addresses, a workspace too
// small for the scratch, no kernel store. The addresses here are never dereferenced.
#include "src/ops/batch_norm_nhwc.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/batch_norm.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

float* Fake(uintptr_t address) { return reinterpret_cast<float*>(address); }

ops::NhwcBatchNormForward Forward(int64_t rows, int64_t channels) {
  return {.x = Fake(0x1000),
          .gamma = Fake(0x2000),
          .beta = Fake(0x3000),
          .running_mean = Fake(0x4000),
          .running_var = Fake(0x5000),
          .y = Fake(0x6000),
          .saved_mean = Fake(0x7000),
          .saved_invstd = Fake(0x8000),
          .rows = rows,
          .channels = channels};
}

ops::NhwcBatchNormBackward Backward(int64_t rows, int64_t channels) {
  return {.dy = Fake(0x1000),
          .x = Fake(0x2000),
          .gamma = Fake(0x3000),
          .saved_mean = Fake(0x4000),
          .saved_invstd = Fake(0x5000),
          .dx = Fake(0x6000),
          .dgamma = Fake(0x7000),
          .dbeta = Fake(0x8000),
          .rows = rows,
          .channels = channels};
}

ops::LoweringContext Context(size_t workspace_bytes) {
  ops::LoweringContext ctx;
  ctx.workspace = Fake(0x100000);
  ctx.workspace_bytes = workspace_bytes;
  return ctx;
}

TEST(NhwcBatchNormLoweringTest, WorkspaceTooSmallIsResourceExhausted) {
  auto train = ops::LowerNhwcBatchNormTrain(Context(4096), "bn1", Forward(32 * 56 * 56, 256));
  EXPECT_EQ(train.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(train.status().message(),
              AllOf(HasSubstr("node 'bn1'"), HasSubstr("1084416 bytes"), HasSubstr("4096")));
  auto grad = ops::LowerNhwcBatchNormGrad(Context(0), "bn1.grad", Backward(98, 2048));
  EXPECT_EQ(grad.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(grad.status().message(), HasSubstr("node 'bn1.grad'"));
}

TEST(NhwcBatchNormLoweringTest, BadSizesAreInvalidArgument) {
  auto one_row = ops::LowerNhwcBatchNormTrain(Context(1 << 20), "bn", Forward(1, 8));
  EXPECT_EQ(one_row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(one_row.status().message(), AllOf(HasSubstr("node 'bn'"), HasSubstr("rows=1")));
  auto no_channels = ops::LowerNhwcBatchNormGrad(Context(1 << 20), "bn", Backward(10, 0));
  EXPECT_EQ(no_channels.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NhwcBatchNormLoweringTest, MissingAddressIsInvalidArgument) {
  ops::NhwcBatchNormForward forward = Forward(64, 8);
  forward.saved_invstd = nullptr;
  auto train = ops::LowerNhwcBatchNormTrain(Context(1 << 20), "bn", forward);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(train.status().message(), HasSubstr("missing"));
}

TEST(NhwcBatchNormLoweringTest, NoKernelStoreIsFailedPrecondition) {
  auto grad = ops::LowerNhwcBatchNormGrad(Context(1 << 20), "bn.grad", Backward(64, 8));
  EXPECT_EQ(grad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(grad.status().message(), HasSubstr("node 'bn.grad'"));
}

TEST(NhwcBatchNormLoweringTest, DataTypesOtherThanFloat32AndSixteenBitAreInvalidArgument) {
  ops::NhwcBatchNormForward forward = Forward(64, 8);
  forward.dtype = DType::kFloat64;
  auto train = ops::LowerNhwcBatchNormTrain(Context(1 << 20), "bn", forward);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      train.status().message(),
      AllOf(HasSubstr("node 'bn'"), HasSubstr("float32, bfloat16 or float16"), HasSubstr("f64")));
  // float16 gets as far as the kernel store (none here).
  forward.dtype = DType::kFloat16;
  auto half = ops::LowerNhwcBatchNormTrain(Context(1 << 20), "bn", forward);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kFailedPrecondition);
  ops::NhwcBatchNormBackward backward = Backward(64, 8);
  backward.dtype = DType::kFloat64;
  auto grad = ops::LowerNhwcBatchNormGrad(Context(1 << 20), "bn.grad", backward);
  EXPECT_EQ(grad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(grad.status().message(), AllOf(HasSubstr("node 'bn.grad'"), HasSubstr("f64")));
  auto recompute = ops::LowerNhwcBatchNormRecompute(Context(0), "bn.twin",
                                                    {.x = Fake(0x1000),
                                                     .gamma = Fake(0x2000),
                                                     .beta = Fake(0x3000),
                                                     .saved_mean = Fake(0x4000),
                                                     .saved_invstd = Fake(0x5000),
                                                     .y = Fake(0x6000),
                                                     .rows = 64,
                                                     .channels = 8,
                                                     .dtype = DType::kInt32});
  EXPECT_EQ(recompute.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(recompute.status().message(), HasSubstr("node 'bn.twin'"));
}

// bfloat16 passes every check that does not need a device, up to the missing kernel store; so
// does an odd address, which only costs the vector width.
TEST(NhwcBatchNormLoweringTest, BFloat16GetsAsFarAsTheKernelStore) {
  for (uintptr_t x : {uintptr_t{0x1000}, uintptr_t{0x1002}}) {
    ops::NhwcBatchNormForward forward = Forward(64, 8);
    forward.dtype = DType::kBFloat16;
    forward.x = Fake(x);
    auto train = ops::LowerNhwcBatchNormTrain(Context(1 << 20), "bn", forward);
    EXPECT_EQ(train.status().code(), absl::StatusCode::kFailedPrecondition) << train.status();
    ops::NhwcBatchNormBackward backward = Backward(64, 8);
    backward.dtype = DType::kBFloat16;
    backward.x = Fake(x);
    auto grad = ops::LowerNhwcBatchNormGrad(Context(1 << 20), "bn.grad", backward);
    EXPECT_EQ(grad.status().code(), absl::StatusCode::kFailedPrecondition) << grad.status();
  }
  // The recompute needs no scratch: an empty workspace is no error.
  auto recompute = ops::LowerNhwcBatchNormRecompute(Context(0), "bn.twin",
                                                    {.x = Fake(0x1000),
                                                     .gamma = Fake(0x2000),
                                                     .beta = Fake(0x3000),
                                                     .saved_mean = Fake(0x4000),
                                                     .saved_invstd = Fake(0x5000),
                                                     .y = Fake(0x6000),
                                                     .rows = 1,
                                                     .channels = 8,
                                                     .dtype = DType::kBFloat16});
  EXPECT_EQ(recompute.status().code(), absl::StatusCode::kFailedPrecondition) << recompute.status();
}

// The node-level type rule: bfloat16 or float32 data, float32 per-channel tensors, nothing else.
TEST(NhwcBatchNormLoweringTest, NhwcDataTypeWantsOneDataTypeAndFloat32Statistics) {
  Graph g;
  const Shape image{2, 3, 3, 8};
  const Value x = *g.AddInput("x", {image, DType::kBFloat16});
  const Value c8 = *g.AddInput("c8", {Shape{8}, DType::kFloat32});
  const Value rm = *g.AddState("rm", {Shape{8}, DType::kFloat32}, Initializer::Zeros());
  const Value rv = *g.AddState("rv", {Shape{8}, DType::kFloat32}, Initializer::Constant(1));
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn", {x, c8, c8, rm, rv},
                    {{"layout", std::string("NHWC")}});
  ASSERT_TRUE(bn.ok()) << bn.status();
  const Node& node = g.node((*bn)[0].node);
  const TensorSpec bf16{image, DType::kBFloat16}, f32{image, DType::kFloat32};
  const TensorSpec c_f32{Shape{8}, DType::kFloat32}, c_bf16{Shape{8}, DType::kBFloat16};

  auto ok = ops::NhwcDataType(node, {bf16, c_f32, c_f32, c_f32, c_f32}, {0});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, DType::kBFloat16);
  auto f32_ok = ops::NhwcDataType(node, {f32, c_f32, c_f32, c_f32, c_f32, f32}, {0, 5});
  ASSERT_TRUE(f32_ok.ok()) << f32_ok.status();
  EXPECT_EQ(*f32_ok, DType::kFloat32);

  auto bf16_gamma = ops::NhwcDataType(node, {bf16, c_bf16, c_f32, c_f32, c_f32}, {0});
  EXPECT_EQ(bf16_gamma.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(bf16_gamma.status().message(),
              AllOf(HasSubstr("node 'bn'"), HasSubstr("bf16[8] for input 1")));
  auto mixed = ops::NhwcDataType(node, {bf16, c_f32, c_f32, c_f32, c_f32, f32}, {0, 5});
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(mixed.status().message(), HasSubstr("input 5"));
  const TensorSpec f16{image, DType::kFloat16};
  auto half = ops::NhwcDataType(node, {f16, c_f32, c_f32, c_f32, c_f32}, {0});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(*half, DType::kFloat16);
  const TensorSpec f64{image, DType::kFloat64};
  auto wide = ops::NhwcDataType(node, {f64, c_f32, c_f32, c_f32, c_f32}, {0});
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(wide.status().message(), AllOf(HasSubstr("node 'bn'"), HasSubstr("f64[2, 3, 3, 8]")));
}

}  // namespace
}  // namespace reprise
