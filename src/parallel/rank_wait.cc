#include "src/parallel/rank_wait.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise {

void DataParallelAbort::Fail(int rank, absl::Status error) {
  if (error.ok()) return;
  absl::MutexLock lock(&mu_);
  if (failure_.has_value()) return;
  failure_ = Failure{rank, std::move(error)};
  failed_.store(true, std::memory_order_release);
}

std::optional<DataParallelAbort::Failure> DataParallelAbort::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

namespace parallel {

absl::Status RankWait::PeerFailure(absl::string_view what) const {
  if (abort_ == nullptr || !abort_->failed()) return absl::OkStatus();
  const std::optional<DataParallelAbort::Failure> failure = abort_->failure();
  if (!failure.has_value() || failure->rank == rank_) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("gave up waiting for ", what, ": rank ", failure->rank,
                                         " failed: ", failure->error.ToString()));
}

absl::Status RankWait::Until(absl::string_view what,
                             const std::function<absl::StatusOr<bool>()>& poll) const {
  const absl::Time deadline = absl::Now() + timeout_;
  // Spin briefly (most waits are short: an enqueue, a small collective), then sleep between polls.
  for (int polls = 0;; ++polls) {
    ASSIGN_OR_RETURN(const bool done, poll());
    if (done) return absl::OkStatus();
    RETURN_IF_ERROR(PeerFailure(what));
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("gave up waiting for ", what, " after ", absl::FormatDuration(timeout_),
                       " (DataParallel::timeout): another rank failed, stopped or never started"));
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(100));
    }
  }
}

}  // namespace parallel
}  // namespace reprise
