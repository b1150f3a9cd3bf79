// kAuto's launch trial (capture/launch_trial.h): which replays launch from where, and a verdict
// that follows the blocks' times, asked for without waiting. The stream's work here is a host
// function sleeping a set time per replay, so that one launch's blocks are the slower by design.
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "capture/launch_trial.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::capture {
namespace {

using ::testing::HasSubstr;

void Sleep(void* micros) { usleep(*static_cast<const useconds_t*>(micros)); }

// Replays the trial through its kSteps steps on `stream`, each "replay" a host function that
// sleeps `host_us` where the trial launches from the host and `device_us` where from the device;
// returns where each replay launched from.
std::vector<bool> RunTrial(LaunchTrial& trial, cudaStream_t stream, const useconds_t& host_us,
                           const useconds_t& device_us) {
  std::vector<bool> on_device;
  for (int r = 0; r < LaunchTrial::kSteps; ++r) {
    on_device.push_back(trial.NextOnDevice());
    EXPECT_EQ(cudaLaunchHostFunc(stream, Sleep,
                                 const_cast<useconds_t*>(on_device.back() ? &device_us : &host_us)),
              cudaSuccess);
    EXPECT_TRUE(trial.AfterReplay(stream).ok());
  }
  return on_device;
}

TEST(LaunchTrialGpuTest, BlocksAlternateAndTheFasterLaunchIsKept) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  // Warm-up on the device, then device, host, host, device blocks of four.
  std::vector<bool> expected(LaunchTrial::kSteps, true);
  for (int r = 2 + 4; r < 2 + 12; ++r) expected[r] = false;
  for (const bool host_slower : {true, false}) {
    SCOPED_TRACE(host_slower ? "host blocks slower" : "device blocks slower");
    REPRISE_ASSERT_OK_AND_ASSIGN(LaunchTrial trial, LaunchTrial::Create());
    const useconds_t slow = 3000, fast = 500;
    EXPECT_EQ(RunTrial(trial, stream.get(), host_slower ? slow : fast, host_slower ? fast : slow),
              expected);
    EXPECT_TRUE(trial.NextOnDevice());  // Past the blocks, until a verdict.
    // The last block is still sleeping: no verdict, and nothing waited for it.
    REPRISE_ASSERT_OK_AND_ASSIGN(std::optional<LaunchTrial::Verdict> early, trial.Poll());
    EXPECT_FALSE(early.has_value());
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::optional<LaunchTrial::Verdict> verdict, trial.Poll());
    ASSERT_TRUE(verdict.has_value());
    EXPECT_EQ(verdict->device, host_slower);
    EXPECT_GT(host_slower ? verdict->host_ms : verdict->device_ms, 2.5);
    EXPECT_LT(host_slower ? verdict->device_ms : verdict->host_ms, 2.5);
    EXPECT_THAT(verdict->text, HasSubstr("measured over 6 steps each"));
  }
}

TEST(LaunchTrialGpuTest, NoVerdictBeforeTheLastBlockEnds) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(LaunchTrial trial, LaunchTrial::Create());
  EXPECT_EQ(trial.Progress(), "measuring both launches: step 0 of 18");
  for (int r = 0; r < LaunchTrial::kSteps - 1; ++r) {
    REPRISE_ASSERT_OK(trial.AfterReplay(stream.get()));
  }
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::optional<LaunchTrial::Verdict> verdict, trial.Poll());
  EXPECT_FALSE(verdict.has_value()) << "the last block has not ended";
  EXPECT_EQ(trial.Progress(), "measuring both launches: step 17 of 18");
  EXPECT_TRUE(trial.NextOnDevice());  // The last block's.
}

}  // namespace
}  // namespace reprise::capture
