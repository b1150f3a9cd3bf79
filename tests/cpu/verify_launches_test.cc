// Verify's interleaved launch list: copies follow their producer on its lane, waits move to the
// last copy, and the happens-before order of the trainer's launches is kept.
#include "src/api/verify_launches.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;

TEST(InterleaveCopiesTest, NoCopiesKeepsTheListAsIs) {
  const std::vector<LaunchOrder> launches = {{0, {}}, {0, {}}, {1, {1}}, {0, {2}}};
  const std::vector<VerifyLaunch> out = InterleaveCopies(launches, {0, 0, 0, 0});
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].original, i);
    EXPECT_EQ(out[i].lane, launches[i].lane);
    EXPECT_EQ(out[i].waits, launches[i].waits);
  }
}

TEST(InterleaveCopiesTest, CopiesFollowTheirProducerAndWaitsMoveToTheLastCopy) {
  // 0: input copy; 1: loss (lane 0); 2: wgrad on lane 1 waiting for 1; 3: dgrad on lane 0;
  // 4: optimizer on lane 1, after 2 on its lane; 5: lane 0 joins lane 1 by waiting for 4.
  const std::vector<LaunchOrder> launches = {{0, {}}, {0, {}}, {1, {1}},
                                             {0, {}}, {1, {}}, {0, {4}}};
  // Launch 2 (wgrad) produces two gradients, launch 3 (dgrad path) one.
  const std::vector<VerifyLaunch> out = InterleaveCopies(launches, {0, 0, 2, 1, 0, 0});
  ASSERT_EQ(out.size(), 9u);
  // Launch 0 stays first: lanes fork after it.
  EXPECT_EQ(out[0].original, 0);
  EXPECT_EQ(out[2].original, 2);
  EXPECT_EQ(out[3].producer, 2);
  EXPECT_EQ(out[3].copy, 0);
  EXPECT_EQ(out[3].lane, 1);
  EXPECT_EQ(out[4].producer, 2);
  EXPECT_EQ(out[4].copy, 1);
  EXPECT_EQ(out[5].original, 3);
  EXPECT_EQ(out[6].producer, 3);
  EXPECT_EQ(out[6].lane, 0);
  EXPECT_EQ(out[7].original, 4);
  EXPECT_EQ(out[8].original, 5);
  EXPECT_THAT(out[2].waits, ElementsAre(1));  // Launch 1 has no copies: still itself.
  // Launch 5 waited for 4 (which has no copies): now out[7].
  EXPECT_THAT(out[8].waits, ElementsAre(7));
}

TEST(InterleaveCopiesTest, AWaitOnAProducerBecomesAWaitOnItsLastCopy) {
  // 1 on lane 1 produces a gradient; 2 on lane 0 waits for 1.
  const std::vector<LaunchOrder> launches = {{0, {}}, {1, {}}, {0, {1}}};
  const std::vector<VerifyLaunch> out = InterleaveCopies(launches, {0, 3, 0});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[4].producer, 1);
  EXPECT_EQ(out[4].copy, 2);
  EXPECT_EQ(out[5].original, 2);
  EXPECT_THAT(out[5].waits, ElementsAre(4));
  // Every wait points backwards: the list is still a valid launch order.
  for (size_t i = 0; i < out.size(); ++i) {
    for (int w : out[i].waits) EXPECT_LT(w, static_cast<int>(i));
  }
}

}  // namespace
}  // namespace reprise
