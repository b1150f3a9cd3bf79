// DiskCache: the kernel store's on-disk layer, shared by every process that uses one folder.
//
// Each entry is one file (layout: cache_entry.h; files: cache_folder.h). A store writes a
// temporary file and renames it into place, so concurrent processes lose nothing and readers
// never see a partial entry. An entry that fails any check (truncated, damaged, another format
// version, another key, unreadable) is deleted, counted and reported once on stderr; the caller
// then compiles the kernel again. After each store, the least recently used entries are pruned
// until the folder holds at most max_bytes.
//
//   ASSIGN_OR_RETURN(auto disk, DiskCache::Open({.dir = "/tmp/kernels"}));
//   KernelStore store("sm_90", std::move(disk));
#ifndef REPRISE_SRC_RUNTIME_DISK_CACHE_H_
#define REPRISE_SRC_RUNTIME_DISK_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "src/runtime/cache_config.h"
#include "src/runtime/cache_folder.h"
#include "src/runtime/kernel_store.h"

namespace reprise::runtime {

struct DiskCacheOptions {
  std::string dir;
  int64_t max_bytes = kDefaultCacheMaxBytes;
};

class DiskCache : public CubinLayer {
 public:
  // Creates `dir` and its parents if needed. kInvalidArgument for an empty dir or a max_bytes
  // below 1; kInternal, naming the folder, when it cannot be created.
  static absl::StatusOr<std::unique_ptr<DiskCache>> Open(DiskCacheOptions options);

  std::optional<KernelBinary> Find(absl::string_view key) override;
  void Store(absl::string_view key, const KernelBinary& binary) override;
  CubinLayer::Stats stats() const override;

  const std::string& dir() const { return options_.dir; }
  int64_t max_bytes() const { return options_.max_bytes; }

 private:
  explicit DiskCache(DiskCacheOptions options) : options_(std::move(options)) {}
  // Deletes a bad entry, counts it and warns about it once per key.
  void Discard(absl::string_view key, const std::string& path, const FileIdentity& identity,
               const absl::Status& problem);

  const DiskCacheOptions options_;
  mutable absl::Mutex mu_;
  CubinLayer::Stats stats_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> warned_keys_ ABSL_GUARDED_BY(mu_);
  bool warned_store_failure_ ABSL_GUARDED_BY(mu_) = false;
};

// The disk layer the environment asks for (see cache_config.h), or nullptr when it is switched
// off or cannot be used; in the second case a warning saying why goes to stderr, since a missing
// cache only costs compile time.
std::unique_ptr<CubinLayer> DiskCacheFromEnvironment(const CacheEnvironment& env);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_DISK_CACHE_H_
