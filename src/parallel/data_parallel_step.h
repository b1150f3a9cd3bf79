// The rank side of a data-parallel Trainer: how a rank's failure is reported to the others, and
// the digest by which ranks check that they run the same step (model_check.h). The graph side
// (gradients bucketed and averaged) is a pass: src/passes/data_parallel.h.
#ifndef REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_
#define REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_

#include <string>

#include "absl/status/status.h"
#include "reprise/data_parallel.h"

namespace reprise::parallel {

// What a rank's failed Trainer::Create returns: `error` (not OK) with the rank named; records the
// failure in options.abort, if any, so that the ranks of this process waiting for this one stop.
absl::Status RankFailed(const DataParallel& options, const absl::Status& error);

// SHA-256 (64 hexadecimal digits) of the model's fingerprint and the buckets' description.
std::string StepDigest(const std::string& model_fingerprint, const std::string& buckets);

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_
