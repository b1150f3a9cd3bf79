// PhaseTimer: phases in the order first marked, a repeated name adding to its entry, and phases
// that add up to the whole span they split.
#include "src/util/phase_timer.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::_;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(PhaseTimerTest, PhasesFollowOneAnotherAndAddUpToTheWhole) {
  const absl::Time outer_start = absl::Now();
  util::PhaseTimer timer;
  absl::SleepFor(absl::Milliseconds(20));
  timer.Mark("first");
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
    timer.Mark("draw");
    absl::SleepFor(absl::Milliseconds(2));
    timer.Mark("upload");
  }
  timer.Mark("empty");
  const double outer_ms = absl::ToDoubleMilliseconds(absl::Now() - outer_start);

  EXPECT_THAT(timer.phases(),
              ElementsAre(Pair("first", _), Pair("draw", _), Pair("upload", _), Pair("empty", _)));
  double sum = 0;
  for (const auto& [name, ms] : timer.phases()) {
    EXPECT_GE(ms, 0) << name;
    sum += ms;
  }
  EXPECT_NEAR(sum, timer.total_ms(), 1e-6 * timer.total_ms());
  EXPECT_LE(timer.total_ms(), outer_ms);
  EXPECT_GE(timer.phases()[0].second, 20);
  EXPECT_GE(timer.phases()[1].second, 15);  // Three marks of 5 ms each, booked once.
  EXPECT_GE(timer.phases()[2].second, 6);
  EXPECT_LT(timer.phases()[3].second, timer.phases()[2].second);
}

TEST(PhaseTimerTest, NoMarkMeansNoPhaseAndNoTime) {
  util::PhaseTimer timer;
  EXPECT_TRUE(timer.phases().empty());
  EXPECT_EQ(timer.total_ms(), 0);
}

}  // namespace
}  // namespace reprise
