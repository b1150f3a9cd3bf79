// The graph side of a data-parallel Trainer, kept apart from the Trainer: TrainOptions::
// data_parallel checked, the gradients bucketed and averaged before the optimizer
// (gradient_buckets.h), and the digest by which ranks check that they run the same step
// (model_check.h).
#ifndef REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_
#define REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_

#include <string>

#include "absl/status/statusor.h"
#include "reprise/data_parallel.h"
#include "src/autodiff/autodiff.h"

namespace reprise::parallel {

// InvalidArgument naming the field for a world size below 1, a rank outside [0, world_size),
// bucket_bytes below 1 or a timeout that is not positive.
absl::Status ValidateDataParallel(const DataParallel& options);

// What a rank's failed Trainer::Create returns: `error` (not OK) with the rank named; records the
// failure in options.abort, if any, so that the ranks of this process waiting for this one stop.
absl::Status RankFailed(const DataParallel& options, const absl::Status& error);

// `t` with its gradients averaged over the ranks in buckets of options.bucket_bytes;
// `*buckets` gets BucketsToString of them.
absl::StatusOr<autodiff::TrainingGraph> AddDataParallel(const DataParallel& options,
                                                        const autodiff::TrainingGraph& t,
                                                        std::string* buckets);

// SHA-256 (64 hexadecimal digits) of the model's fingerprint and the buckets' description.
std::string StepDigest(const std::string& model_fingerprint, const std::string& buckets);

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_DATA_PARALLEL_STEP_H_
