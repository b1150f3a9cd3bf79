#include "src/util/parallel_for.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

TEST(ParallelForTest, RunsEveryTaskExactlyOnce) {
  constexpr int kCount = 1000;
  std::vector<std::atomic<int>> runs(kCount);
  ParallelFor(kCount, 4, [&](int64_t i) { runs[i].fetch_add(1); });
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

TEST(ParallelForTest, NothingToDoAndTooFewThreadsAreFine) {
  int calls = 0;
  ParallelFor(0, 4, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  ParallelFor(3, 0, [&](int64_t) { ++calls; });  // Runs on the calling thread alone.
  EXPECT_EQ(calls, 3);
}

// Each task waits until all have started: this finishes only if they really run at once.
TEST(ParallelForTest, TasksRunConcurrently) {
  constexpr int kTasks = 4;
  absl::Mutex mu;
  int started = 0;
  std::atomic<int> met{0};
  ParallelFor(kTasks, kTasks, [&](int64_t) {
    absl::MutexLock lock(&mu);
    ++started;
    if (mu.AwaitWithTimeout(absl::Condition(
                                +[](int* n) { return *n == kTasks; }, &started),
                            absl::Seconds(30))) {
      met.fetch_add(1);
    }
  });
  EXPECT_EQ(met.load(), kTasks);
}

TEST(ParallelForTest, HardwareThreadsIsPositive) { EXPECT_GE(HardwareThreads(), 1); }

}  // namespace
}  // namespace reprise
