#include "src/runtime/conv_plan_record.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/runtime/sha256.h"

namespace reprise::runtime {
namespace {

constexpr absl::string_view kHeader = "reprise conv plan 1";

absl::Status Bad(size_t line, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("conv plan record, line ", line + 1, ": ", why));
}

// The value after "<field> " on `line`, or an error naming the field it should have been.
absl::StatusOr<absl::string_view> Field(const std::vector<absl::string_view>& lines, size_t index,
                                        absl::string_view field) {
  if (index >= lines.size()) return Bad(index, absl::StrCat("missing '", field, "'"));
  absl::string_view line = lines[index];
  const std::string prefix = absl::StrCat(field, " ");
  if (!absl::ConsumePrefix(&line, prefix) || line.empty()) {
    return Bad(index, absl::StrCat("expected '", field, " <value>', got '", lines[index], "'"));
  }
  return line;
}

}  // namespace

std::string EncodeConvPlanRecord(const ConvPlanRecord& record) {
  return absl::StrCat(kHeader, "\nname ", record.name, "\ncandidates ", record.candidates,
                      "\nmedian_ms ", absl::StrFormat("%.17g", record.median_ms), "\n");
}

absl::StatusOr<ConvPlanRecord> DecodeConvPlanRecord(absl::string_view text) {
  if (!absl::ConsumeSuffix(&text, "\n")) return Bad(0, "does not end with a line break");
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines[0] != kHeader) {
    return Bad(0, absl::StrCat("expected '", kHeader, "', got '", lines[0], "'"));
  }
  ConvPlanRecord record;
  absl::StatusOr<absl::string_view> name = Field(lines, 1, "name");
  if (!name.ok()) return name.status();
  record.name = std::string(*name);
  absl::StatusOr<absl::string_view> candidates = Field(lines, 2, "candidates");
  if (!candidates.ok()) return candidates.status();
  if (!absl::SimpleAtoi(*candidates, &record.candidates) || candidates->front() == '+') {
    return Bad(2, absl::StrCat("candidates '", *candidates, "' is not an integer"));
  }
  if (record.candidates < 1) return Bad(2, "candidates below 1");
  absl::StatusOr<absl::string_view> median = Field(lines, 3, "median_ms");
  if (!median.ok()) return median.status();
  if (!absl::SimpleAtod(*median, &record.median_ms) || !std::isfinite(record.median_ms) ||
      record.median_ms <= 0) {
    return Bad(3, absl::StrCat("median_ms '", *median, "' is not a finite positive number"));
  }
  if (lines.size() != 4) return Bad(4, "lines after 'median_ms'");
  return record;
}

std::string ConvPlanRecordKey(absl::string_view what, absl::string_view device,
                              int64_t cudnn_version, int64_t frontend_version) {
  const std::string text = absl::StrCat(kHeader, "\n", what, "\ndevice ", device, "\ncudnn ",
                                        cudnn_version, "\nfrontend ", frontend_version, "\n");
  const Sha256Digest digest = Sha256(text);
  return ToHex(digest);
}

}  // namespace reprise::runtime
