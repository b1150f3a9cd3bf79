#include "src/runtime/cudnn_conv_record.h"

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/runtime/plan_record.h"

namespace reprise::runtime {
namespace {

// How many algorithms cuDNN's enum of `kind` defines.
int AlgorithmCount(ConvKind kind) {
  switch (kind) {
    case ConvKind::kForward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvKind::kBackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case ConvKind::kBackwardFilter:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

struct Counts {
  absl::Mutex mu;
  ConvLegacyStats stats ABSL_GUARDED_BY(mu);
};

Counts& ProcessCounts() {
  static Counts* counts = new Counts();  // Never destroyed: read at any exit.
  return *counts;
}

}  // namespace

std::string ConvAlgorithmRecordName(const ConvAlgorithm& algorithm) {
  return absl::StrCat("algo", algorithm.algo, "_math", static_cast<int>(algorithm.math));
}

absl::StatusOr<ConvAlgorithm> ParseConvAlgorithmRecordName(ConvKind kind, absl::string_view name) {
  const auto bad = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("legacy conv ", ConvKindName(kind), " algorithm name '", name, "': ", why));
  };
  // Digits only: no sign, no space, nothing SimpleAtoi would also take.
  const auto number = [](absl::string_view text, int& value) {
    return !text.empty() && text.size() < 6 && absl::c_all_of(text, absl::ascii_isdigit) &&
           absl::SimpleAtoi(text, &value);
  };
  int algo = -1, math = -1;
  const size_t split = name.find("_math");
  if (!absl::StartsWith(name, "algo") || split == absl::string_view::npos || split < 4 ||
      !number(name.substr(4, split - 4), algo) || !number(name.substr(split + 5), math)) {
    return bad("expected algo<N>_math<M>");
  }
  if (algo < 0 || algo >= AlgorithmCount(kind)) {
    return bad(absl::StrCat("cuDNN defines algorithms 0 to ", AlgorithmCount(kind) - 1));
  }
  if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
      math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH) {
    return bad("not one of cuDNN's math types");
  }
  return ConvAlgorithm{.algo = algo, .math = static_cast<cudnnMathType_t>(math)};
}

std::string ConvAlgorithmRecordKey(const ConvAlgorithmKey& key) {
  const std::string what = absl::StrCat(
      "legacy conv ", ConvKindName(key.kind), " ", key.shape.ToString(), "\ntf32 ", key.allow_tf32,
      " deterministic ", key.deterministic, " workspace ", key.workspace_limit);
  return ConvPlanRecordKey(what, key.device, static_cast<int64_t>(cudnnGetVersion()),
                           /*frontend_version=*/0);
}

ConvLegacyStats ConvLegacyStats::Since(const ConvLegacyStats& before) const {
  return {.measured = measured - before.measured,
          .from_records = from_records - before.from_records,
          .records_discarded = records_discarded - before.records_discarded,
          .measure_ms = measure_ms - before.measure_ms};
}

ConvLegacyStats LegacyConvStats() {
  Counts& counts = ProcessCounts();
  absl::MutexLock lock(&counts.mu);
  return counts.stats;
}

void CountLegacyConvChoice(const ConvLegacyStats& add) {
  Counts& counts = ProcessCounts();
  absl::MutexLock lock(&counts.mu);
  counts.stats.measured += add.measured;
  counts.stats.from_records += add.from_records;
  counts.stats.records_discarded += add.records_discarded;
  counts.stats.measure_ms += add.measure_ms;
}

}  // namespace reprise::runtime
