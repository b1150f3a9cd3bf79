// The data-parallel pass: TrainOptions::parallel.data_parallel checked, and the training graph's
// gradients bucketed and averaged over the ranks before the optimizer (gradient_buckets.h). The
// ranks' communication itself lives in src/parallel.
#ifndef REPRISE_SRC_PASSES_DATA_PARALLEL_H_
#define REPRISE_SRC_PASSES_DATA_PARALLEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "reprise/data_parallel.h"
#include "src/autodiff/autodiff.h"

namespace reprise::passes {

// InvalidArgument naming the field for a world size below 1, a rank outside [0, world_size),
// bucket_bytes below 1 or a timeout that is not positive.
absl::Status ValidateDataParallel(const DataParallel& options);

// `t` with its gradients averaged over the ranks in buckets of options.bucket_bytes;
// `*buckets` gets BucketsToString of them.
absl::StatusOr<autodiff::TrainingGraph> AddDataParallel(const DataParallel& options,
                                                        const autodiff::TrainingGraph& t,
                                                        std::string* buckets);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_DATA_PARALLEL_H_
