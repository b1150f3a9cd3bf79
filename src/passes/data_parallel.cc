#include "src/passes/data_parallel.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/passes/gradient_buckets.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

absl::Status ValidateDataParallel(const DataParallel& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataParallel::world_size must be at least 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel::rank must be in [0, ",
                                                   options.world_size, "), got ", options.rank));
  }
  if (options.bucket_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataParallel::bucket_bytes must be at least 1, got ", options.bucket_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel::timeout must be positive, got ",
                                                   absl::FormatDuration(options.timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<autodiff::TrainingGraph> AddDataParallel(const DataParallel& options,
                                                        const autodiff::TrainingGraph& t,
                                                        std::string* buckets) {
  RETURN_IF_ERROR(ValidateDataParallel(options));
  ASSIGN_OR_RETURN(const std::vector<GradientBucket> assigned,
                   AssignGradientBuckets(t, options.bucket_bytes));
  if (assigned.empty()) {
    return absl::InvalidArgumentError(
        "data parallel training needs a loss that depends on at least one parameter");
  }
  *buckets = BucketsToString(assigned);
  return AverageGradients(t, assigned);
}

}  // namespace reprise::passes
