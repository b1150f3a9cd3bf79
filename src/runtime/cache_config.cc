#include "src/runtime/cache_config.h"

#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace reprise::runtime {
namespace {

std::optional<std::string> Variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool Set(const std::optional<std::string>& value) { return value.has_value() && !value->empty(); }

}  // namespace

CacheEnvironment CacheEnvironment::FromProcess() {
  return CacheEnvironment{.cache_dir = Variable("REPRISE_CACHE_DIR"),
                          .xdg_cache_home = Variable("XDG_CACHE_HOME"),
                          .home = Variable("HOME"),
                          .max_bytes = Variable("REPRISE_CACHE_MAX_BYTES")};
}

absl::StatusOr<CacheConfig> ResolveCacheConfig(const CacheEnvironment& env) {
  CacheConfig config;
  if (Set(env.max_bytes)) {
    absl::StatusOr<int64_t> max_bytes = ParseByteSize(*env.max_bytes);
    if (!max_bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("REPRISE_CACHE_MAX_BYTES: ", max_bytes.status().message()));
    }
    config.max_bytes = *max_bytes;
  }
  if (Set(env.cache_dir)) {
    if (*env.cache_dir == "off") {
      config.enabled = false;
      return config;
    }
    config.dir = *env.cache_dir;
  } else if (Set(env.xdg_cache_home) && absl::StartsWith(*env.xdg_cache_home, "/")) {
    config.dir = absl::StrCat(*env.xdg_cache_home, "/reprise/kernels");
  } else if (Set(env.home)) {
    config.dir = absl::StrCat(*env.home, "/.cache/reprise/kernels");
  } else {
    return absl::FailedPreconditionError(
        "no folder for the kernel cache: set REPRISE_CACHE_DIR, XDG_CACHE_HOME or HOME "
        "(or REPRISE_CACHE_DIR=off)");
  }
  return config;
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  int shift = 0;
  for (const auto& [suffix, bits] : {std::pair<absl::string_view, int>{"KiB", 10},
                                     {"MiB", 20},
                                     {"GiB", 30},
                                     {"K", 10},
                                     {"M", 20},
                                     {"G", 30}}) {
    if (absl::EndsWith(digits, suffix)) {
      digits.remove_suffix(suffix.size());
      shift = bits;
      break;
    }
  }
  uint64_t value = 0;
  if (digits.empty() || !absl::ascii_isdigit(digits[0]) || !absl::SimpleAtoi(digits, &value) ||
      value == 0 || value > (uint64_t{std::numeric_limits<int64_t>::max()} >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size: expected a positive count such as 4096, ",
                     "64K, 256M or 1G"));
  }
  return static_cast<int64_t>(value << shift);
}

}  // namespace reprise::runtime
