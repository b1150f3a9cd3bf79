// The check at Trainer creation that every rank runs the same step: each rank's digest of its model
// and of its plan's collectives (bucket sizes and types) is gathered on every rank and compared, so
// ranks that would exchange mismatched gradients, or wait for collectives the others never call,
// fail at once, all alike.
#ifndef REPRISE_SRC_PARALLEL_MODEL_CHECK_H_
#define REPRISE_SRC_PARALLEL_MODEL_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/parallel/communicator.h"

namespace reprise::parallel {

inline constexpr int kDigestBytes = 64;  // 64 hexadecimal digits: a SHA-256.

// OK when every rank's digest equals rank 0's; else FailedPrecondition naming the ranks that differ
// and both digests. `digests` are in rank order.
absl::Status CompareRankDigests(absl::Span<const std::string> digests);

// All-gathers `digest` (kDigestBytes characters) over `comm` and compares (device memory: through
// a small device buffer, waiting on `stream` with comm.WaitForStream). InvalidArgument for a digest
// of another length; the communicator's errors (a rank that gave up waiting) pass through.
absl::Status CheckSameStepOnEveryRank(Communicator& comm, const std::string& digest,
                                      cudaStream_t stream);

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_MODEL_CHECK_H_
