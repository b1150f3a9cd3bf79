// The files of an on-disk kernel cache folder: reading and atomically writing entries, listing,
// verifying, pruning least recently used first, clearing. Shared by the DiskCache layer and the
// reprise-cache tool. Safe against other processes doing the same in the same folder: entries
// appear only by rename, and a removal checks it removes the file it judged.
//
// Names: an entry is "<key>.rke" (key: 64 lower-case hex digits); a writer's temporary file is
// ".tmp.<entry name>.<pid>.<thread>.<random>". Nothing else in the folder is touched.
// An entry's modification time is its last use: a hit sets it to now.
#ifndef REPRISE_SRC_RUNTIME_CACHE_FOLDER_H_
#define REPRISE_SRC_RUNTIME_CACHE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace reprise::runtime {

// Entries larger than this are damage, not kernels: reading one would only exhaust memory.
inline constexpr int64_t kMaxCacheEntryBytes = int64_t{1} << 30;
// A temporary file this old belongs to a writer that died; pruning removes it.
inline constexpr absl::Duration kStaleTemporaryAge = absl::Hours(1);

std::string CacheEntryPath(absl::string_view dir, absl::string_view key);
// True for "<64 hex>.rke"; sets *key (if not null) to the hex part.
bool IsCacheEntryName(absl::string_view file_name, std::string* key = nullptr);

// Which file a path named when it was read, so that a later removal can check it still does.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
};

// The bytes of the entry file at `path`; with `mark_used`, also sets its modification time to now
// (best effort). kNotFound when nothing is there; kDataLoss, with the reason, when something is
// there that cannot be read as a file (a folder, no permission, larger than kMaxCacheEntryBytes,
// an I/O error). `identity`, if not null, is set whenever something was found.
absl::StatusOr<std::string> ReadCacheFile(const std::string& path, bool mark_used,
                                          FileIdentity* identity);

// Writes `bytes` to a new temporary file in `dir` and renames it to `path` (which must be in
// `dir`), so that readers see the old entry or the new one, never a part. kInternal with the
// call and errno's text on failure; the temporary file is removed then.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 absl::string_view bytes);

// Removes whatever is at `path` (a folder too) if it is still the file `identity` names; a file
// that a concurrent writer renamed into place since is left alone. True when removed.
bool RemoveIfSame(const std::string& path, const FileIdentity& identity);

struct CacheFile {
  std::string path;
  std::string key;  // Empty for temporary files.
  int64_t bytes = 0;
  absl::Time last_use;  // Modification time.
  bool regular = true;  // False for a folder or other non-file in an entry's place.
  FileIdentity identity;
};

struct CacheListing {
  std::vector<CacheFile> entries;  // Oldest last use first; ties by key.
  std::vector<CacheFile> temporaries;
  int64_t entry_bytes = 0;
};

// kNotFound when `dir` does not exist; kInternal with errno's text when it cannot be read.
absl::StatusOr<CacheListing> ListCacheFolder(const std::string& dir);

struct BadCacheEntry {
  std::string path;
  absl::Status problem;
};

struct VerifyResult {
  int64_t good = 0;
  std::vector<BadCacheEntry> bad;
};

// Reads every entry and checks its header, checksum and that it holds the key of its name.
// Changes nothing. Errors as ListCacheFolder.
absl::StatusOr<VerifyResult> VerifyCacheFolder(const std::string& dir);

struct PruneResult {
  int64_t removed_entries = 0;
  int64_t removed_bytes = 0;
  int64_t removed_temporaries = 0;
  int64_t kept_entries = 0;
  int64_t kept_bytes = 0;
};

// Removes temporary files older than kStaleTemporaryAge (at `now`), then entries, least recently
// used first, until the entries take at most `max_bytes`. Errors as ListCacheFolder.
absl::StatusOr<PruneResult> PruneCacheFolder(const std::string& dir, int64_t max_bytes,
                                             absl::Time now);

// Removes every entry and temporary file; other files stay. Errors as ListCacheFolder.
absl::StatusOr<PruneResult> ClearCacheFolder(const std::string& dir);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CACHE_FOLDER_H_
