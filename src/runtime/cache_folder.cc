#include "src/runtime/cache_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "src/runtime/cache_entry.h"

namespace reprise::runtime {
namespace {

constexpr absl::string_view kEntrySuffix = ".rke";
constexpr absl::string_view kTemporaryPrefix = ".tmp.";

// Closes a file descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error that close() may return for a file being written.
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

std::string ErrnoText(int error) {
  return std::error_code(error, std::generic_category()).message();
}

FileIdentity IdentityOf(const struct stat& st) {
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// A 64-bit random number from a per-thread generator; with the pid and thread id it makes a
// temporary name no other writer uses.
uint64_t RandomBits() {
  thread_local std::mt19937_64 generator([] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }());
  return generator();
}

void RemovePath(const std::string& path, bool regular) {
  if (regular) {
    ::unlink(path.c_str());
  } else {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("write: ", ErrnoText(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

}  // namespace

std::string CacheEntryPath(absl::string_view dir, absl::string_view key) {
  return absl::StrCat(dir, "/", key, kEntrySuffix);
}

bool IsCacheEntryName(absl::string_view file_name, std::string* key) {
  if (!absl::ConsumeSuffix(&file_name, kEntrySuffix) || file_name.size() != 64) return false;
  for (char c : file_name) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  if (key != nullptr) *key = std::string(file_name);
  return true;
}

absl::StatusOr<std::string> ReadCacheFile(const std::string& path, bool mark_used,
                                          FileIdentity* identity) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::DataLossError(absl::StrCat("cannot stat: ", ErrnoText(errno)));
  }
  if (identity != nullptr) *identity = IdentityOf(st);
  if (!S_ISREG(st.st_mode)) return absl::DataLossError("unreadable: not a regular file");
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::DataLossError(absl::StrCat("unreadable: ", ErrnoText(errno)));
  }
  // The descriptor names one file from here on, even if a writer renames another into place.
  if (::fstat(fd.get(), &st) != 0) {
    return absl::DataLossError(absl::StrCat("cannot stat: ", ErrnoText(errno)));
  }
  if (identity != nullptr) *identity = IdentityOf(st);
  if (!S_ISREG(st.st_mode)) return absl::DataLossError("unreadable: not a regular file");
  if (st.st_size > kMaxCacheEntryBytes) {
    return absl::DataLossError(absl::StrCat("unreadable: ", st.st_size, " bytes is too large"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::DataLossError(absl::StrCat("unreadable: ", ErrnoText(errno)));
    if (got == 0) break;  // Shorter than fstat said: the entry's checks will tell.
    done += static_cast<size_t>(got);
  }
  bytes.resize(done);
  if (mark_used) (void)::futimens(fd.get(), nullptr);
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 absl::string_view bytes) {
  const std::string name = std::filesystem::path(path).filename().string();
  std::string temporary;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 8 && raw_fd < 0; ++attempt) {
    temporary = absl::StrFormat("%s/%s%s.%d.%d.%016x", dir, kTemporaryPrefix, name, ::getpid(),
                                ::gettid(), RandomBits());
    raw_fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (raw_fd < 0 && errno != EEXIST) break;
  }
  if (raw_fd < 0) {
    return absl::InternalError(absl::StrCat("creating ", temporary, ": ", ErrnoText(errno)));
  }
  ScopedFd fd(raw_fd);
  absl::Status status = WriteAll(fd.get(), bytes);
  if (fd.Close() != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("close: ", ErrnoText(errno)));
  }
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("rename to ", path, ": ", ErrnoText(errno)));
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, ": ", status.message()));
  }
  return absl::OkStatus();
}

bool RemoveIfSame(const std::string& path, const FileIdentity& identity) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return false;
  const FileIdentity now = IdentityOf(st);
  if (now.device != identity.device || now.inode != identity.inode) return false;
  RemovePath(path, S_ISREG(st.st_mode));
  return true;
}

absl::StatusOr<CacheListing> ListCacheFolder(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> folder(::opendir(dir.c_str()), &::closedir);
  if (folder == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("no kernel cache folder at ", dir));
    }
    return absl::InternalError(
        absl::StrCat("cannot read the kernel cache folder ", dir, ": ", ErrnoText(errno)));
  }
  CacheListing listing;
  while (const struct dirent* item = ::readdir(folder.get())) {
    const absl::string_view name = item->d_name;
    CacheFile file;
    const bool temporary = absl::StartsWith(name, kTemporaryPrefix);
    if (!temporary && !IsCacheEntryName(name, &file.key)) continue;
    struct stat st;
    if (::fstatat(dirfd(folder.get()), item->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;  // Removed since readdir saw it.
    }
    file.path = absl::StrCat(dir, "/", name);
    file.regular = S_ISREG(st.st_mode);
    file.bytes = file.regular ? static_cast<int64_t>(st.st_size) : 0;
    file.last_use = absl::TimeFromTimespec(st.st_mtim);
    file.identity = IdentityOf(st);
    if (temporary) {
      listing.temporaries.push_back(std::move(file));
    } else {
      listing.entry_bytes += file.bytes;
      listing.entries.push_back(std::move(file));
    }
  }
  std::sort(listing.entries.begin(), listing.entries.end(),
            [](const CacheFile& a, const CacheFile& b) {
              return std::tie(a.last_use, a.key) < std::tie(b.last_use, b.key);
            });
  return listing;
}

absl::StatusOr<VerifyResult> VerifyCacheFolder(const std::string& dir) {
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir);
  if (!listing.ok()) return listing.status();
  VerifyResult result;
  for (const CacheFile& entry : listing->entries) {
    absl::StatusOr<std::string> bytes = ReadCacheFile(entry.path, /*mark_used=*/false, nullptr);
    if (absl::IsNotFound(bytes.status())) continue;  // Pruned since it was listed.
    absl::Status problem = bytes.status();
    if (problem.ok()) problem = DecodeCacheEntry(*bytes, entry.key).status();
    if (problem.ok()) {
      ++result.good;
    } else {
      result.bad.push_back({entry.path, std::move(problem)});
    }
  }
  return result;
}

absl::StatusOr<PruneResult> PruneCacheFolder(const std::string& dir, int64_t max_bytes,
                                             absl::Time now) {
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir);
  if (!listing.ok()) return listing.status();
  PruneResult result;
  for (const CacheFile& temporary : listing->temporaries) {
    if (now - temporary.last_use < kStaleTemporaryAge) continue;
    if (RemoveIfSame(temporary.path, temporary.identity)) ++result.removed_temporaries;
  }
  int64_t total = listing->entry_bytes;
  for (const CacheFile& entry : listing->entries) {
    // Something other than a file in an entry's place holds no kernel: always garbage.
    if (total > max_bytes || !entry.regular) {
      RemoveIfSame(entry.path, entry.identity);  // Gone either way, unless rewritten meanwhile.
      total -= entry.bytes;
      ++result.removed_entries;
      result.removed_bytes += entry.bytes;
    } else {
      ++result.kept_entries;
      result.kept_bytes += entry.bytes;
    }
  }
  return result;
}

absl::StatusOr<PruneResult> ClearCacheFolder(const std::string& dir) {
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir);
  if (!listing.ok()) return listing.status();
  PruneResult result;
  for (const CacheFile& temporary : listing->temporaries) {
    RemovePath(temporary.path, temporary.regular);
    ++result.removed_temporaries;
  }
  for (const CacheFile& entry : listing->entries) {
    RemovePath(entry.path, entry.regular);
    ++result.removed_entries;
    result.removed_bytes += entry.bytes;
  }
  return result;
}

}  // namespace reprise::runtime
