// Shapes count their elements and bytes without wrapping: an extent product past int64 is an
// error naming the shape, never a small or negative count.
#include "reprise/tensor.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(TensorTest, CountsThatFitAreExact) {
  EXPECT_EQ(Shape().NumElements(), 1);
  EXPECT_EQ(Shape({32, 256}).NumElements(), 32 * 256);
  EXPECT_EQ(*Shape({32, 256}).CheckedNumElements(), 32 * 256);
  EXPECT_EQ(*(TensorSpec{Shape{32, 256}, DType::kBFloat16}.CheckedBytes()), 32 * 256 * 2);
}

TEST(TensorTest, ElementCountsPastInt64AreRefusedNamingTheShape) {
  const Shape square{int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_EQ(square.NumElements(), -1);  // Not 0, as the wrapped product would be.
  const absl::StatusOr<int64_t> n = square.CheckedNumElements();
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(n.status().message(), HasSubstr("[4294967296, 4294967296]"));

  const Shape wide{kMax, 2};
  EXPECT_EQ(wide.NumElements(), -1);  // Not -2.
  EXPECT_EQ(wide.CheckedNumElements().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ByteSizesPastInt64AreRefusedNamingTheSpec) {
  // 2^62 elements fit; their 2^64 bytes as f32 do not.
  const TensorSpec spec{Shape{int64_t{1} << 62}, DType::kFloat32};
  EXPECT_TRUE(spec.shape.CheckedNumElements().ok());
  const absl::StatusOr<int64_t> bytes = spec.CheckedBytes();
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("f32[4611686018427387904]"));
}

}  // namespace
}  // namespace reprise
