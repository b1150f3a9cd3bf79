// Paths that must be regular files: what a path is when it is not one, and the file a write to a
// path replaces. Writers that build their file beside its target and rename it into place
// (safetensors, token shards) would otherwise replace a device node, a FIFO or a symbolic link
// with a regular file (as root, a write to /dev/null would replace /dev/null).
#ifndef REPRISE_SRC_UTIL_FILE_TARGET_H_
#define REPRISE_SRC_UTIL_FILE_TARGET_H_

#include <sys/stat.h>

#include <string>

#include "absl/status/statusor.h"

namespace reprise {

// "a directory", "a named pipe (FIFO)", "a character device", ...: what a file of `mode` is, for
// messages that refuse anything but a regular file.
std::string FileKindName(mode_t mode);

// The file a write to `path` replaces: `path` itself (also when it does not exist yet), or for a
// symbolic link the file it resolves to, so that the link stays and its target gets the new
// contents. InvalidArgument, naming the path and what it is, when that exists and is not a
// regular file or the link dangles; Internal when it cannot be examined.
absl::StatusOr<std::string> ResolveWriteTarget(const std::string& path);

}  // namespace reprise

#endif  // REPRISE_SRC_UTIL_FILE_TARGET_H_
