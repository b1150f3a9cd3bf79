#include "src/parallel/data_parallel_step.h"

#include "absl/strings/str_cat.h"
#include "src/runtime/sha256.h"

namespace reprise::parallel {

absl::Status RankFailed(const DataParallel& options, const absl::Status& error) {
  if (error.ok()) return error;
  if (options.abort != nullptr) options.abort->Fail(options.rank, error);
  return absl::Status(error.code(), absl::StrCat("data-parallel rank ", options.rank, " of ",
                                                 options.world_size, ": ", error.message()));
}

std::string StepDigest(const std::string& model_fingerprint, const std::string& buckets) {
  return runtime::ToHex(runtime::Sha256(absl::StrCat(model_fingerprint, "\n", buckets)));
}

}  // namespace reprise::parallel
