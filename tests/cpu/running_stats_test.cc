// RunningTimes: mean over every sample, median over the last kWindow.
#include "src/util/running_stats.h"

#include "gtest/gtest.h"

namespace reprise::util {
namespace {

TEST(RunningTimesTest, EmptyIsZero) {
  RunningTimes t;
  EXPECT_EQ(t.count(), 0);
  EXPECT_EQ(t.mean(), 0);
  EXPECT_EQ(t.median(), 0);
}

TEST(RunningTimesTest, MeanAndMedianOfOddAndEvenCounts) {
  RunningTimes t;
  for (double v : {5.0, 1.0, 100.0}) t.Add(v);
  EXPECT_EQ(t.count(), 3);
  EXPECT_DOUBLE_EQ(t.mean(), 106.0 / 3);
  EXPECT_DOUBLE_EQ(t.median(), 5.0);  // The outlier moves the mean, not the median.
  t.Add(7.0);
  EXPECT_DOUBLE_EQ(t.median(), 6.0);
}

TEST(RunningTimesTest, MedianForgetsOldSamplesMeanDoesNot) {
  RunningTimes t;
  for (int i = 0; i < RunningTimes::kWindow; ++i) t.Add(1000.0);
  for (int i = 0; i < RunningTimes::kWindow; ++i) t.Add(2.0);
  EXPECT_EQ(t.count(), 2 * RunningTimes::kWindow);
  EXPECT_DOUBLE_EQ(t.median(), 2.0);
  EXPECT_DOUBLE_EQ(t.mean(), 501.0);
}

}  // namespace
}  // namespace reprise::util
