#include "src/runtime/plan_record.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/runtime/sha256.h"

namespace reprise::runtime {
namespace {

constexpr absl::string_view kConvHeader = "reprise conv plan 1";
constexpr absl::string_view kMatmulHeader = "reprise matmul plan 1";
constexpr absl::string_view kGeluHeader = "reprise gelu product 1";

// A record's form: its first line, and what its errors call it.
struct Form {
  absl::string_view header;
  absl::string_view what;
};
constexpr Form kConv{kConvHeader, "conv plan record"};
constexpr Form kMatmul{kMatmulHeader, "matmul plan record"};
constexpr Form kGelu{kGeluHeader, "gelu product record"};

absl::Status Bad(const Form& form, size_t line, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(form.what, ", line ", line + 1, ": ", why));
}

// The value after "<field> " on `line`, or an error naming the field it should have been.
absl::StatusOr<absl::string_view> Field(const Form& form,
                                        const std::vector<absl::string_view>& lines, size_t index,
                                        absl::string_view field) {
  if (index >= lines.size()) return Bad(form, index, absl::StrCat("missing '", field, "'"));
  absl::string_view line = lines[index];
  const std::string prefix = absl::StrCat(field, " ");
  if (!absl::ConsumePrefix(&line, prefix) || line.empty()) {
    return Bad(form, index,
               absl::StrCat("expected '", field, " <value>', got '", lines[index], "'"));
  }
  return line;
}

std::string Encode(const Form& form, const PlanRecord& record) {
  return absl::StrCat(form.header, "\nname ", record.name, "\ncandidates ", record.candidates,
                      "\nmedian_ms ", absl::StrFormat("%.17g", record.median_ms), "\n");
}

absl::StatusOr<PlanRecord> Decode(const Form& form, absl::string_view text) {
  if (!absl::ConsumeSuffix(&text, "\n")) return Bad(form, 0, "does not end with a line break");
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines[0] != form.header) {
    return Bad(form, 0, absl::StrCat("expected '", form.header, "', got '", lines[0], "'"));
  }
  PlanRecord record;
  absl::StatusOr<absl::string_view> name = Field(form, lines, 1, "name");
  if (!name.ok()) return name.status();
  if (absl::StrContains(*name, ' ')) return Bad(form, 1, "the name has a space");
  record.name = std::string(*name);
  absl::StatusOr<absl::string_view> candidates = Field(form, lines, 2, "candidates");
  if (!candidates.ok()) return candidates.status();
  if (!absl::SimpleAtoi(*candidates, &record.candidates) || candidates->front() == '+') {
    return Bad(form, 2, absl::StrCat("candidates '", *candidates, "' is not an integer"));
  }
  if (record.candidates < 1) return Bad(form, 2, "candidates below 1");
  absl::StatusOr<absl::string_view> median = Field(form, lines, 3, "median_ms");
  if (!median.ok()) return median.status();
  if (!absl::SimpleAtod(*median, &record.median_ms) || !std::isfinite(record.median_ms) ||
      record.median_ms <= 0) {
    return Bad(form, 3, absl::StrCat("median_ms '", *median, "' is not a finite positive number"));
  }
  if (lines.size() != 4) return Bad(form, 4, "lines after 'median_ms'");
  return record;
}

std::string Key(absl::string_view text) { return ToHex(Sha256(text)); }

}  // namespace

std::string EncodeConvPlanRecord(const PlanRecord& record) { return Encode(kConv, record); }
std::string EncodeMatmulPlanRecord(const PlanRecord& record) { return Encode(kMatmul, record); }
std::string EncodeGeluProductRecord(const PlanRecord& record) { return Encode(kGelu, record); }

absl::StatusOr<PlanRecord> DecodeConvPlanRecord(absl::string_view text) {
  return Decode(kConv, text);
}
absl::StatusOr<PlanRecord> DecodeMatmulPlanRecord(absl::string_view text) {
  return Decode(kMatmul, text);
}
absl::StatusOr<PlanRecord> DecodeGeluProductRecord(absl::string_view text) {
  return Decode(kGelu, text);
}

std::string ConvPlanRecordKey(absl::string_view what, absl::string_view device,
                              int64_t cudnn_version, int64_t frontend_version) {
  return Key(absl::StrCat(kConvHeader, "\n", what, "\ndevice ", device, "\ncudnn ", cudnn_version,
                          "\nfrontend ", frontend_version, "\n"));
}

std::string MatmulPlanRecordKey(absl::string_view what, absl::string_view device,
                                int64_t cublaslt_version) {
  return Key(absl::StrCat(kMatmulHeader, "\n", what, "\ndevice ", device, "\ncublaslt ",
                          cublaslt_version, "\n"));
}

std::string GeluProductRecordKey(absl::string_view what, absl::string_view device,
                                 int64_t cudnn_version, int64_t frontend_version,
                                 int64_t cublaslt_version) {
  return Key(absl::StrCat(kGeluHeader, "\n", what, "\ndevice ", device, "\ncudnn ", cudnn_version,
                          "\nfrontend ", frontend_version, "\ncublaslt ", cublaslt_version, "\n"));
}

}  // namespace reprise::runtime
