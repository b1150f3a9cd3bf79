// Parsing and printing MirrorOptions (include/reprise/mirror_options.h) for the --mirror flags.
#include "reprise/mirror_options.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace reprise {

absl::StatusOr<MirrorOptions> ParseMirrorOptions(absl::string_view text) {
  if (text == "off") return MirrorOptions{};
  if (text == "auto") return MirrorOptions{.policy = MirrorOptions::Policy::kAuto};
  int64_t bytes = 0;
  if (absl::SimpleAtoi(text, &bytes) && bytes >= 0) {
    return MirrorOptions{.policy = MirrorOptions::Policy::kBudget, .budget_bytes = bytes};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mirror policy '", text, "': expected off, auto or a byte budget such as 100000000"));
}

std::string MirrorOptionsToString(const MirrorOptions& options) {
  switch (options.policy) {
    case MirrorOptions::Policy::kOff:
      return "off";
    case MirrorOptions::Policy::kAuto:
      return "auto";
    case MirrorOptions::Policy::kBudget:
      return absl::StrCat(options.budget_bytes);
  }
  return "?";
}

}  // namespace reprise
