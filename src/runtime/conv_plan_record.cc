#include "src/runtime/conv_plan_record.h"

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

absl::StatusOr<int64_t> Integer(absl::string_view text, size_t index, absl::string_view what) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || text.front() == '+') {
    return Bad(index, absl::StrCat(what, " '", text, "' is not an integer"));
  }
  return value;
}

}  // namespace

std::string EncodeConvPlanRecord(const ConvPlanRecord& record) {
  std::string text = absl::StrCat(kHeader, "\nengine ", record.engine_id, "\n");
  for (const auto& [type, value] : record.knobs)
    absl::StrAppend(&text, "knob ", type, " ", value, "\n");
  absl::StrAppend(&text, "candidates ", record.candidates, "\nmedian_ms ",
                  absl::StrFormat("%.17g", record.median_ms), "\nname ", record.name, "\n");
  return text;
}

absl::StatusOr<ConvPlanRecord> DecodeConvPlanRecord(absl::string_view text) {
  if (!absl::ConsumeSuffix(&text, "\n")) return Bad(0, "does not end with a line break");
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines[0] != kHeader) {
    return Bad(0, absl::StrCat("expected '", kHeader, "', got '", lines[0], "'"));
  }
  ConvPlanRecord record;
  size_t i = 1;
  absl::StatusOr<absl::string_view> engine = Field(lines, i, "engine");
  if (!engine.ok()) return engine.status();
  absl::StatusOr<int64_t> engine_id = Integer(*engine, i, "engine");
  if (!engine_id.ok()) return engine_id.status();
  if (*engine_id < 0) return Bad(i, "negative engine id");
  record.engine_id = *engine_id;
  for (++i; i < lines.size() && absl::StartsWith(lines[i], "knob "); ++i) {
    const std::vector<absl::string_view> parts = absl::StrSplit(lines[i], ' ');
    if (parts.size() != 3) return Bad(i, "expected 'knob <type> <value>'");
    absl::StatusOr<int64_t> type = Integer(parts[1], i, "knob type");
    if (!type.ok()) return type.status();
    absl::StatusOr<int64_t> value = Integer(parts[2], i, "knob value");
    if (!value.ok()) return value.status();
    if (*type < 0) return Bad(i, "negative knob type");
    if (!record.knobs.empty() && *type <= record.knobs.back().first) {
      return Bad(i, "knob types not increasing");
    }
    record.knobs.emplace_back(*type, *value);
  }
  absl::StatusOr<absl::string_view> candidates = Field(lines, i, "candidates");
  if (!candidates.ok()) return candidates.status();
  absl::StatusOr<int64_t> count = Integer(*candidates, i, "candidates");
  if (!count.ok()) return count.status();
  if (*count < 1) return Bad(i, "candidates below 1");
  record.candidates = *count;
  ++i;
  absl::StatusOr<absl::string_view> median = Field(lines, i, "median_ms");
  if (!median.ok()) return median.status();
  if (!absl::SimpleAtod(*median, &record.median_ms) || !std::isfinite(record.median_ms) ||
      record.median_ms <= 0) {
    return Bad(i, absl::StrCat("median_ms '", *median, "' is not a finite positive number"));
  }
  ++i;
  absl::StatusOr<absl::string_view> name = Field(lines, i, "name");
  if (!name.ok()) return name.status();
  record.name = std::string(*name);
  if (++i != lines.size()) return Bad(i, "lines after 'name'");
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
