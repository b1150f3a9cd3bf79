// PlanRecord: which library configuration a measurement chose for one operation, kept beside the
// kernels in the kernel store's lower layer so that a later process uses that one instead of
// timing the candidates again. Two forms: a graph-API convolution's cuDNN engine configuration
// (src/runtime/cudnn_conv_graph.h) and a product's cuBLASLt algorithm configuration
// (src/runtime/lt_matmul.h). Pure text in, text out: no cuDNN, no cuBLASLt and no file I/O here,
// so every way a record can be wrong is testable on a string.
//
// Text form, one field per line, in this order:
//   reprise conv plan 1        (or: reprise matmul plan 1, reprise gelu product 1)
//   name <the chosen configuration's name: cuDNN's engine and knobs, e.g. eng22_k2=8_k13=1, or
//         LtMatmul::ConfigName's algo66_tile29_stages35_..., or for a GELU product cublaslt or
//         cudnn:<cuDNN's plan name>>
//   candidates <how many were timed, >= 1>
//   median_ms <the winner's median time>
// A later process finds the named configuration among the candidates (a convolution) or builds it
// and has cuBLASLt check it (a product). (For cuDNN the name, not cudnn-frontend's engine id and
// knob map: some knob types cuDNN reports have no frontend name, so a plan rebuilt from them could
// not be asked for.)
//
// The key under which a record is stored covers everything the choice depends on: the operation,
// the options, the GPU and the library versions, so that a record is never applied where it was
// not measured.
#ifndef REPRISE_SRC_RUNTIME_PLAN_RECORD_H_
#define REPRISE_SRC_RUNTIME_PLAN_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

// The kernel-store kinds of the records (KernelStore::FindRecord).
inline constexpr absl::string_view kConvPlanRecordKind = "cudnn conv plan";
inline constexpr absl::string_view kMatmulPlanRecordKind = "cublaslt matmul plan";
inline constexpr absl::string_view kGeluProductRecordKind = "gelu product choice";

struct PlanRecord {
  std::string name;
  int64_t candidates = 0;
  double median_ms = 0;

  bool operator==(const PlanRecord& other) const = default;
};

std::string EncodeConvPlanRecord(const PlanRecord& record);
std::string EncodeMatmulPlanRecord(const PlanRecord& record);
std::string EncodeGeluProductRecord(const PlanRecord& record);

// kDataLoss, saying which line is wrong, for anything but the form above: another form's header,
// a missing or extra line, a field out of order, an empty name or one with a space, a number that
// does not parse or is out of range (candidates < 1, a median that is not finite and positive).
absl::StatusOr<PlanRecord> DecodeConvPlanRecord(absl::string_view text);
absl::StatusOr<PlanRecord> DecodeMatmulPlanRecord(absl::string_view text);
absl::StatusOr<PlanRecord> DecodeGeluProductRecord(absl::string_view text);

// The records' keys: a hex SHA-256 of `what` (the operation and its options, as the plan caches
// key it), `device` and the library versions.
std::string ConvPlanRecordKey(absl::string_view what, absl::string_view device,
                              int64_t cudnn_version, int64_t frontend_version);
std::string MatmulPlanRecordKey(absl::string_view what, absl::string_view device,
                                int64_t cublaslt_version);
// A raced GELU product's choice depends on both libraries.
std::string GeluProductRecordKey(absl::string_view what, absl::string_view device,
                                 int64_t cudnn_version, int64_t frontend_version,
                                 int64_t cublaslt_version);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_PLAN_RECORD_H_
