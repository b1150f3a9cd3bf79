// An in-process stand-in for NCCL over host memory, for CPU tests of what sits on top of the
// Communicator (the all_reduce lowering, the model check). MakeFakeCommunicators(n) gives one
// Communicator per rank, each to be used from a thread of its own; the ranks meet at every
// collective. A reduction adds the ranks' values, each multiplied by 1 / n first (as NCCL's ncclAvg
// does for floats), in rank order in float32, rounding 16-bit results once at the end. Streams are
// ignored: a collective is done when it returns. When the ranks call different collectives (op,
// count, type or root), every rank fails with InvalidArgument naming its own call and rank 0's.
// A rank waiting for the others gives up as NCCL's would (rank_wait.h): Aborted once `abort`
// records another rank's failure, DeadlineExceeded after `timeout`; the job is then broken and
// every later collective on any rank fails with FailedPrecondition.
#ifndef REPRISE_SRC_PARALLEL_FAKE_COMMUNICATOR_H_
#define REPRISE_SRC_PARALLEL_FAKE_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "reprise/data_parallel.h"
#include "src/parallel/communicator.h"

namespace reprise::parallel {

std::vector<std::unique_ptr<Communicator>> MakeFakeCommunicators(
    int world_size, absl::Duration timeout = absl::InfiniteDuration(),
    std::shared_ptr<DataParallelAbort> abort = nullptr);

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_FAKE_COMMUNICATOR_H_
