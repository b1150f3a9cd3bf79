// Host-only text of the trainer's report that the public header does not carry (TrainerReport's
// own ToText and ToJson are declared in reprise/trainer.h).
#ifndef REPRISE_SRC_API_TRAINER_REPORT_FORMAT_H_
#define REPRISE_SRC_API_TRAINER_REPORT_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "reprise/trainer.h"

namespace reprise {

// Whether `stats`' Create built or discarded any cuDNN graph-API convolution plan (what the text
// forms print their counts for).
inline bool BuiltConvPlans(const TrainerStats& stats) {
  return stats.conv_plans_heuristic + stats.conv_plans_measured + stats.conv_plans_from_records +
             stats.conv_plan_records_discarded >
         0;
}

// Whether `stats`' Create measured a legacy-call convolution algorithm, took one from a record or
// discarded a record.
inline bool MeasuredLegacyConvs(const TrainerStats& stats) {
  return stats.conv_legacy_measured + stats.conv_legacy_from_records +
             stats.conv_legacy_records_discarded >
         0;
}

// Whether `stats`' Create chose any cuBLASLt algorithm by measurement or from a record, or
// discarded a record.
inline bool MeasuredMatmulChoices(const TrainerStats& stats) {
  return stats.matmul_choices_measured + stats.matmul_choices_from_records +
             stats.matmul_records_discarded >
         0;
}

// Why Create ran out of memory: `bytes` asked for `what`, the memory plan's classes from `stats`,
// the lanes' workspaces, and the device's free and total memory (free_bytes < 0: unknown).
std::string OutOfMemoryText(absl::string_view what, int64_t bytes, const TrainerStats& stats,
                            int lanes, int64_t free_bytes, int64_t total_bytes);

}  // namespace reprise

#endif  // REPRISE_SRC_API_TRAINER_REPORT_FORMAT_H_
