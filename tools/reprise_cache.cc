// reprise-cache: stats, list, verify, prune and clear the on-disk kernel cache; see
// src/tools/cache_tool.h for the commands and flags.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "src/runtime/cache_config.h"
#include "src/tools/cache_tool.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const reprise::tools::CacheToolResult result = reprise::tools::RunCacheTool(
      args, reprise::runtime::CacheEnvironment::FromProcess(), absl::Now());
  std::fputs(result.out.c_str(), stdout);
  std::fputs(result.err.c_str(), stderr);
  return result.exit_code;
}
