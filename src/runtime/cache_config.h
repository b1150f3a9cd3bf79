// Where the on-disk kernel cache lives and how large it may grow, from the environment:
//   REPRISE_CACHE_DIR        the folder; "off" disables the cache
//   XDG_CACHE_HOME, HOME     otherwise $XDG_CACHE_HOME/reprise/kernels, else
//   ~/.cache/reprise/kernels REPRISE_CACHE_MAX_BYTES  the size cap, e.g. 268435456, 256M or 1G
//   (default 256 MiB)
// The variables are passed in, not read here, so that tests need not change the process's.
#ifndef REPRISE_SRC_RUNTIME_CACHE_CONFIG_H_
#define REPRISE_SRC_RUNTIME_CACHE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

inline constexpr int64_t kDefaultCacheMaxBytes = int64_t{256} << 20;

// The variables above; unset ones are nullopt.
struct CacheEnvironment {
  std::optional<std::string> cache_dir;       // REPRISE_CACHE_DIR
  std::optional<std::string> xdg_cache_home;  // XDG_CACHE_HOME
  std::optional<std::string> home;            // HOME
  std::optional<std::string> max_bytes;       // REPRISE_CACHE_MAX_BYTES

  static CacheEnvironment FromProcess();
};

struct CacheConfig {
  bool enabled = true;
  std::string dir;  // Empty when disabled.
  int64_t max_bytes = kDefaultCacheMaxBytes;
};

// Empty variables count as unset; a relative XDG_CACHE_HOME is ignored, as the XDG spec says.
// kInvalidArgument for a REPRISE_CACHE_MAX_BYTES that ParseByteSize refuses;
// kFailedPrecondition when the cache is on but neither XDG_CACHE_HOME nor HOME gives a folder.
absl::StatusOr<CacheConfig> ResolveCacheConfig(const CacheEnvironment& env);

// A byte count: digits with an optional binary suffix K, M or G (also KiB, MiB, GiB), e.g. "4096",
// "64K", "256MiB". kInvalidArgument, quoting `text`, for anything else, zero or a value past int64.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CACHE_CONFIG_H_
