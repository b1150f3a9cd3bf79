#include "src/util/file_target.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace reprise {

std::string FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

absl::StatusOr<std::string> ResolveWriteTarget(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return path;  // A new file.
    return absl::InternalError(
        absl::StrCat("writing ", path, ": cannot stat: ", std::strerror(errno)));
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing ", path, ": the symbolic link cannot be resolved (",
                       std::strerror(errno), "); refusing to replace it"));
    }
    target = resolved;
    std::free(resolved);
    if (::stat(target.c_str(), &st) != 0) {
      return absl::InternalError(absl::StrCat("writing ", path, ": cannot stat its target ", target,
                                              ": ", std::strerror(errno)));
    }
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "writing ", path, ": ", target == path ? "" : absl::StrCat("its target ", target, " "),
        "is ", FileKindName(st.st_mode), ", not a regular file; refusing to replace it"));
  }
  return target;
}

}  // namespace reprise
