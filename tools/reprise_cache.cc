// reprise-cache: stats, list, verify, prune and clear the on-disk kernel cache; see
// src/tools/cache_tool.h for the commands and flags (parsed there, not by Abseil: the command is
// a positional argument). Exit status as every tool's: 0 ok, 1 failure, 2 usage error.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "src/runtime/cache_config.h"
#include "src/tools/cache_tool.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& arg : args) {
    if (arg == "--version") {
      std::printf("%s\n", reprise::cli::VersionText("reprise-cache").c_str());
      return reprise::cli::kExitOk;
    }
  }
  const reprise::tools::CacheToolResult result = reprise::tools::RunCacheTool(
      args, reprise::runtime::CacheEnvironment::FromProcess(), absl::Now());
  std::fputs(result.out.c_str(), stdout);
  std::fputs(result.err.c_str(), stderr);
  return result.exit_code;
}
