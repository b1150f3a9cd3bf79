// How one rank waits for the others while a data-parallel trainer is created: it polls until the
// work is done, and gives up promptly when another rank of its process has failed (the job's
// DataParallelAbort) or when DataParallel::timeout has passed, so that no rank waits forever for
// a peer that failed or never started. The caller then aborts its communicator.
#ifndef REPRISE_SRC_PARALLEL_RANK_WAIT_H_
#define REPRISE_SRC_PARALLEL_RANK_WAIT_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "reprise/data_parallel.h"

namespace reprise::parallel {

class RankWait {
 public:
  // Rank `rank` giving up after `timeout` per wait, or as soon as `abort` (may be null) records
  // another rank's failure.
  RankWait(int rank, absl::Duration timeout, std::shared_ptr<DataParallelAbort> abort)
      : rank_(rank), timeout_(timeout), abort_(std::move(abort)) {}
  // From the rank's options.
  explicit RankWait(const DataParallel& options)
      : RankWait(options.rank, options.timeout, options.abort) {}

  // Calls `poll` until it returns true. Its error passes through. Aborted when another rank has
  // failed (naming that rank and its error, and `what`); DeadlineExceeded naming `what` and the
  // timeout when it passes first. `poll` runs at least once, even when the job is aborted
  // already, so that finished work is not reported as abandoned.
  absl::Status Until(absl::string_view what,
                     const std::function<absl::StatusOr<bool>()>& poll) const;

  // The error Until returns once another rank has failed, or OK while none has.
  absl::Status PeerFailure(absl::string_view what) const;

  int rank() const { return rank_; }
  absl::Duration timeout() const { return timeout_; }

 private:
  int rank_;
  absl::Duration timeout_;
  std::shared_ptr<DataParallelAbort> abort_;
};

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_RANK_WAIT_H_
