// The overflow-checked arithmetic behind every element count, byte size, offset and padding.
#include "src/util/checked_math.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace reprise {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedMathTest, ProductsThatFitAreExactAndOverflowsAreRefused) {
  EXPECT_EQ(CheckedMul(1 << 20, 1 << 20), int64_t{1} << 40);
  EXPECT_FALSE(CheckedMul(int64_t{1} << 32, int64_t{1} << 32).has_value());
  EXPECT_FALSE(CheckedMul(kMax, 2).has_value());
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
  EXPECT_FALSE(CheckedAdd(kMax, 1).has_value());
  EXPECT_FALSE(CheckedSub(-kMax, 2).has_value());
}

TEST(CheckedMathTest, ProductOfExtentsRefusesNegativeExtentsAndWraps) {
  EXPECT_EQ(CheckedProduct({}), 1);
  EXPECT_EQ(CheckedProduct({2, 3, 4}), 24);
  EXPECT_EQ(CheckedProduct({kMax, 0}), 0);
  EXPECT_FALSE(CheckedProduct({int64_t{1} << 32, int64_t{1} << 32}).has_value());
  EXPECT_FALSE(CheckedProduct({kMax, 2}).has_value());
  EXPECT_FALSE(CheckedProduct({4, -1}).has_value());
}

TEST(CheckedMathTest, AlignUpRefusesWhatWouldPassInt64) {
  EXPECT_EQ(CheckedAlignUp(0, 256), 0);
  EXPECT_EQ(CheckedAlignUp(1, 256), 256);
  EXPECT_EQ(CheckedAlignUp(512, 256), 512);
  EXPECT_FALSE(CheckedAlignUp(kMax - 3, 256).has_value());
  EXPECT_FALSE(CheckedAlignUp(-1, 256).has_value());
  EXPECT_FALSE(CheckedAlignUp(5, 0).has_value());
}

TEST(CheckedMathTest, SaturatingEstimatesStopAtInt64Max) {
  EXPECT_EQ(SaturatingAdd(3, 4), 7);
  EXPECT_EQ(SaturatingAdd(int64_t{1} << 62, int64_t{1} << 62), kMax);
  EXPECT_EQ(SaturatingAdd(kMax, 1), kMax);
  EXPECT_EQ(SaturatingMul(8, int64_t{1} << 60), kMax);
  EXPECT_EQ(SaturatingMul(8, int64_t{1} << 58), int64_t{1} << 61);
}

}  // namespace
}  // namespace reprise
