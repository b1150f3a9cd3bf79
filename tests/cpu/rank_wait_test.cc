// How a data-parallel rank waits for the others and gives up (src/parallel/rank_wait.h), and what
// a rank whose creation fails tells them (DataParallelAbort, RankFailed): no rank waits forever.
#include "src/parallel/rank_wait.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/parallel/data_parallel_step.h"
#include "src/passes/data_parallel.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

TEST(DataParallelAbortTest, TheFirstFailureIsKeptAndOkIsNoFailure) {
  DataParallelAbort abort;
  EXPECT_FALSE(abort.failed());
  abort.Fail(0, absl::OkStatus());
  EXPECT_FALSE(abort.failed());
  EXPECT_FALSE(abort.failure().has_value());
  abort.Fail(2, absl::InternalError("first"));
  abort.Fail(1, absl::InternalError("second"));
  ASSERT_TRUE(abort.failed());
  ASSERT_TRUE(abort.failure().has_value());
  EXPECT_EQ(abort.failure()->rank, 2);
  EXPECT_EQ(abort.failure()->error, absl::InternalError("first"));
}

TEST(RankWaitTest, PollsUntilDone) {
  int polls = 0;
  const parallel::RankWait wait(0, absl::Minutes(1), nullptr);
  EXPECT_TRUE(
      wait.Until("three polls", [&]() -> absl::StatusOr<bool> { return ++polls == 3; }).ok());
  EXPECT_EQ(polls, 3);
}

TEST(RankWaitTest, ThePollsErrorPassesThrough) {
  const parallel::RankWait wait(0, absl::Minutes(1), nullptr);
  EXPECT_EQ(wait.Until("x", []() -> absl::StatusOr<bool> { return absl::InternalError("bad"); }),
            absl::InternalError("bad"));
}

TEST(RankWaitTest, AnotherRanksFailureEndsTheWaitAtOnce) {
  auto abort = std::make_shared<DataParallelAbort>();
  const parallel::RankWait wait(0, absl::InfiniteDuration(), abort);
  std::thread peer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    abort->Fail(3, absl::FailedPreconditionError("no GPU on rank 3"));
  });
  const absl::Time start = absl::Now();
  const absl::Status s = wait.Until("NCCL's setup", []() -> absl::StatusOr<bool> { return false; });
  peer.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("gave up waiting for NCCL's setup: rank 3 failed"));
  EXPECT_THAT(s.message(), HasSubstr("no GPU on rank 3"));
}

TEST(RankWaitTest, FinishedWorkIsNotReportedAsAbandoned) {
  auto abort = std::make_shared<DataParallelAbort>();
  abort->Fail(1, absl::InternalError("gone"));
  const parallel::RankWait wait(0, absl::Minutes(1), abort);
  EXPECT_TRUE(wait.Until("done", []() -> absl::StatusOr<bool> { return true; }).ok());
  EXPECT_EQ(wait.Until("pending", []() -> absl::StatusOr<bool> { return false; }).code(),
            absl::StatusCode::kAborted);
}

TEST(RankWaitTest, ARanksOwnFailureDoesNotEndItsWait) {
  auto abort = std::make_shared<DataParallelAbort>();
  abort->Fail(0, absl::InternalError("mine"));
  const parallel::RankWait wait(0, absl::Milliseconds(20), abort);
  EXPECT_EQ(wait.Until("x", []() -> absl::StatusOr<bool> { return false; }).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(RankWaitTest, GivesUpAfterTheTimeout) {
  const parallel::RankWait wait(1, absl::Milliseconds(150), nullptr);
  const absl::Time start = absl::Now();
  const absl::Status s =
      wait.Until("the model check", []() -> absl::StatusOr<bool> { return false; });
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("gave up waiting for the model check after 150ms"));
  EXPECT_THAT(s.message(), HasSubstr("DataParallel::timeout"));
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(10));
}

TEST(RankFailedTest, NamesTheRankAndTellsTheOthers) {
  auto abort = std::make_shared<DataParallelAbort>();
  const DataParallel dp{.rank = 1, .world_size = 4, .abort = abort};
  const absl::Status s = parallel::RankFailed(dp, absl::InvalidArgumentError("device 9"));
  EXPECT_EQ(s, absl::InvalidArgumentError("data-parallel rank 1 of 4: device 9"));
  ASSERT_TRUE(abort->failure().has_value());
  EXPECT_EQ(abort->failure()->rank, 1);
  EXPECT_TRUE(parallel::RankFailed(dp, absl::OkStatus()).ok());
}

// Through the public API, on any machine: a rank whose Trainer::Create fails before it joins the
// job (here: a GPU that does not exist, or none at all) says which rank it is and records the
// failure for the ranks of its process.
TEST(RankFailedTest, AFailedTrainerCreateRecordsItsRank) {
  const models::Mlp mlp =
      *models::BuildMlp({.batch = 4, .input_features = 3, .depth = 1, .width = 8, .classes = 2});
  auto abort = std::make_shared<DataParallelAbort>();
  TrainOptions options;
  options.device = 1000;
  options.parallel.data_parallel = DataParallel{.rank = 1, .world_size = 2, .abort = abort};
  const absl::Status s = Trainer::Create(mlp.graph, mlp.loss, options).status();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("data-parallel rank 1 of 2: "));
  ASSERT_TRUE(abort->failure().has_value());
  EXPECT_EQ(abort->failure()->rank, 1);
  EXPECT_EQ(abort->failure()->error.code(), s.code());
}

TEST(RankFailedTest, ATimeoutThatIsNotPositiveIsRefused) {
  EXPECT_THAT(passes::ValidateDataParallel({.timeout = absl::ZeroDuration()}).message(),
              HasSubstr("DataParallel::timeout must be positive"));
}

}  // namespace
}  // namespace reprise
