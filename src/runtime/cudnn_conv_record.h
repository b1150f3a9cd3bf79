// Measured algorithm choices of cuDNN's legacy convolution calls (ConvOptions::measure) kept on
// disk beside the kernels, in plan_record.h's conv form, so that a later process takes the
// algorithm cudnnFind*AlgorithmEx chose instead of running every algorithm again: at ResNet-50
// batch 256 the legacy calls' searches (the residual blocks' in-place data-gradient sums) took
// about 2.5 s of every Create, with the graph API's plans all taken from their records (H100,
// 2026-12-06). Names, keys and the process's counts here; CudnnConv::Create uses them.
#ifndef REPRISE_SRC_RUNTIME_CUDNN_CONV_RECORD_H_
#define REPRISE_SRC_RUNTIME_CUDNN_CONV_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cudnn_conv.h"

namespace reprise::runtime {

// The kernel-store kind of the records (KernelStore::FindRecord).
inline constexpr absl::string_view kConvAlgorithmRecordKind = "cudnn legacy conv algorithm";

// A record's name for `algorithm`: "algo<cuDNN's enum of its kind>_math<cudnnMathType_t>", e.g.
// "algo1_math1".
std::string ConvAlgorithmRecordName(const ConvAlgorithm& algorithm);
// The algorithm and math type a name gives (workspace_bytes left 0), or kDataLoss naming the
// name: another form, an algorithm outside `kind`'s enum or a math type cuDNN does not define.
absl::StatusOr<ConvAlgorithm> ParseConvAlgorithmRecordName(ConvKind kind, absl::string_view name);

// The record's key: the kind, shape, options and GPU of `key` (plan_record.h's conv key, with
// cuDNN's version; a record never applies where it was not measured).
std::string ConvAlgorithmRecordKey(const ConvAlgorithmKey& key);

// How this process's measured legacy-call algorithms were chosen (those the process-wide
// ConvAlgorithmCache answered are not counted).
struct ConvLegacyStats {
  int64_t measured = 0;           // Chosen by cudnnFind*AlgorithmEx now.
  int64_t from_records = 0;       // Taken from a measured record found on disk.
  int64_t records_discarded = 0;  // Records that did not decode or no longer apply.
  double measure_ms = 0;          // Wall time of the searches.

  ConvLegacyStats Since(const ConvLegacyStats& before) const;
};
ConvLegacyStats LegacyConvStats();
void CountLegacyConvChoice(const ConvLegacyStats& add);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_CONV_RECORD_H_
