// ConvPlanRecord: which cuDNN engine configuration a measurement chose for one graph-API
// convolution (src/runtime/cudnn_conv_graph.h), kept beside the kernels in the kernel store's lower
// layer so that a later process builds that one plan instead of timing the candidates again.
// Pure text in, text out: no cuDNN and no file I/O here, so every way a record can be wrong is
// testable on a string.
//
// Text form, one field per line, in this order:
//   reprise conv plan 1
//   name <cuDNN's name of the engine and its knob choices, e.g. eng22_k2=8_k13=1>
//   candidates <how many were timed, >= 1>
//   median_ms <the winner's median time>
// A later process finds the named configuration among the heuristics' candidates and builds it
// alone. (The name, not cudnn-frontend's engine id and knob map: some knob types cuDNN reports have
// no frontend name, so a plan rebuilt from them could not be asked for.)
//
// The key under which a record is stored (ConvPlanRecordKey) covers everything the choice depends
// on: the convolution, the options, the GPU and the cuDNN and cudnn-frontend versions, so that a
// record is never applied where it was not measured.
#ifndef REPRISE_SRC_RUNTIME_CONV_PLAN_RECORD_H_
#define REPRISE_SRC_RUNTIME_CONV_PLAN_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

// The kernel-store kind of a record (KernelStore::FindRecord).
inline constexpr absl::string_view kConvPlanRecordKind = "cudnn conv plan";

struct ConvPlanRecord {
  std::string name;
  int64_t candidates = 0;
  double median_ms = 0;

  bool operator==(const ConvPlanRecord& other) const = default;
};

std::string EncodeConvPlanRecord(const ConvPlanRecord& record);

// kDataLoss, saying which line is wrong, for anything but the form above: a missing or extra
// line, a field out of order, an empty name, a number that does not parse or is out of range
// (candidates < 1, a median that is not finite and positive).
absl::StatusOr<ConvPlanRecord> DecodeConvPlanRecord(absl::string_view text);

// The record's key: a hex SHA-256 of `what` (the convolution and its options, as the plan cache
// keys it), `device` and the two library versions.
std::string ConvPlanRecordKey(absl::string_view what, absl::string_view device,
                              int64_t cudnn_version, int64_t frontend_version);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CONV_PLAN_RECORD_H_
