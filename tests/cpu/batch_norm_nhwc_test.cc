// The channels-last batch-norm lowerings reject what they cannot run before touching the device:
// bad sizes, missing addresses, a workspace too small for the scratch, no kernel store. The
// addresses here are never dereferenced.
#include "src/ops/batch_norm_nhwc.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace reprise
