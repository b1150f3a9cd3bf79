#include "src/runtime/disk_cache.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/runtime/cache_entry.h"
#include "src/runtime/cache_folder.h"

namespace reprise::runtime {

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(DiskCacheOptions options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("DiskCache needs a folder");
  if (options.max_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskCache max_bytes must be positive; got ", options.max_bytes));
  }
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error || !std::filesystem::is_directory(options.dir, error)) {
    return absl::InternalError(absl::StrCat("cannot create the kernel cache folder ", options.dir,
                                            ": ", error ? error.message() : "not a folder"));
  }
  return std::unique_ptr<DiskCache>(new DiskCache(std::move(options)));
}

std::optional<KernelBinary> DiskCache::Find(absl::string_view key) {
  const std::string path = CacheEntryPath(options_.dir, key);
  FileIdentity identity;
  absl::StatusOr<std::string> bytes = ReadCacheFile(path, /*mark_used=*/true, &identity);
  if (absl::IsNotFound(bytes.status())) return std::nullopt;
  if (!bytes.ok()) {
    Discard(key, path, identity, bytes.status());
    return std::nullopt;
  }
  absl::StatusOr<KernelBinary> binary = DecodeCacheEntry(*bytes, key);
  if (!binary.ok()) {
    Discard(key, path, identity, binary.status());
    return std::nullopt;
  }
  return *std::move(binary);
}

void DiskCache::Discard(absl::string_view key, const std::string& path,
                        const FileIdentity& identity, const absl::Status& problem) {
  RemoveIfSame(path, identity);
  absl::MutexLock lock(&mu_);
  ++stats_.corrupt_discarded;
  if (warned_keys_.insert(std::string(key)).second) {
    absl::FPrintF(stderr, "reprise: kernel cache: discarded %s (%s); compiling it again\n", path,
                  problem.message());
  }
}

void DiskCache::Store(absl::string_view key, const KernelBinary& binary) {
  absl::Status status = WriteFileAtomically(options_.dir, CacheEntryPath(options_.dir, key),
                                            EncodeCacheEntry(key, binary));
  int64_t pruned = 0;
  if (status.ok()) {
    absl::StatusOr<PruneResult> prune =
        PruneCacheFolder(options_.dir, options_.max_bytes, absl::Now());
    if (prune.ok()) {
      pruned = prune->removed_entries;
    } else {
      status = prune.status();
    }
  }
  absl::MutexLock lock(&mu_);
  stats_.pruned += pruned;
  if (status.ok()) {
    ++stats_.stores;
    return;
  }
  ++stats_.store_failures;
  if (!warned_store_failure_) {
    warned_store_failure_ = true;
    absl::FPrintF(stderr, "reprise: kernel cache: %s; kernels will be compiled again next time\n",
                  status.message());
  }
}

CubinLayer::Stats DiskCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::unique_ptr<CubinLayer> DiskCacheFromEnvironment(const CacheEnvironment& env) {
  absl::StatusOr<CacheConfig> config = ResolveCacheConfig(env);
  if (!config.ok()) {
    absl::FPrintF(stderr, "reprise: kernel cache off: %s\n", config.status().message());
    return nullptr;
  }
  if (!config->enabled) return nullptr;
  absl::StatusOr<std::unique_ptr<DiskCache>> cache =
      DiskCache::Open({.dir = config->dir, .max_bytes = config->max_bytes});
  if (!cache.ok()) {
    absl::FPrintF(stderr, "reprise: kernel cache off: %s\n", cache.status().message());
    return nullptr;
  }
  return *std::move(cache);
}

}  // namespace reprise::runtime
