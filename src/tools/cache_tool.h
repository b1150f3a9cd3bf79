// reprise-cache: looks after the on-disk kernel cache. The tool's logic lives here, as a function
// of its arguments and environment, so that tests run every command and every bad flag.
//
//   reprise-cache [--dir DIR] stats        folder, entries, bytes, cap
//   reprise-cache [--dir DIR] list         key, kernel, arch, sizes and last use of each entry
//   reprise-cache [--dir DIR] verify       checks every entry; fails naming the bad ones
//   reprise-cache [--dir DIR] prune [--max-size BYTES]   least recently used first, to the cap
//   reprise-cache [--dir DIR] clear        removes every entry
// Without --dir the folder and cap come from the environment (runtime/cache_config.h). A folder
// that does not exist yet is an empty cache (stats: 0 entries, exit 0).
// Flags are parsed here rather than with absl flags, which exit the process on a bad flag.
#ifndef REPRISE_SRC_TOOLS_CACHE_TOOL_H_
#define REPRISE_SRC_TOOLS_CACHE_TOOL_H_

#include <string>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "src/runtime/cache_config.h"

namespace reprise::tools {

struct CacheToolResult {
  // 0 on success; 2 for a usage error (unknown command or flag, missing or bad value); 1 for any
  // other error, a bad entry found by verify included.
  int exit_code = 0;
  std::string out;  // For stdout.
  std::string err;  // For stderr: "reprise-cache: <what is wrong>".
};

// `args` are the command line without the program's name; `now` dates stale temporary files.
CacheToolResult RunCacheTool(absl::Span<const std::string> args,
                             const runtime::CacheEnvironment& env, absl::Time now);

}  // namespace reprise::tools

#endif  // REPRISE_SRC_TOOLS_CACHE_TOOL_H_
