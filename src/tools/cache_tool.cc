#include "src/tools/cache_tool.h"

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cache_entry.h"
#include "src/runtime/cache_folder.h"

namespace reprise::tools {
namespace {

constexpr absl::string_view kUsage =
    "usage: reprise-cache [--dir DIR] stats|list|verify|clear\n"
    "       reprise-cache [--dir DIR] prune [--max-size BYTES]\n"
    "  --dir DIR         the cache folder (default: REPRISE_CACHE_DIR, else\n"
    "                    $XDG_CACHE_HOME/reprise/kernels, else ~/.cache/reprise/kernels)\n"
    "  --max-size BYTES  prune to this size, e.g. 100M (default: REPRISE_CACHE_MAX_BYTES or "
    "256M)\n"
    "  --version         reprise's version and build type\n"
    "A folder that does not exist yet is an empty cache. Exit status: 0 ok, 1 failure (verify\n"
    "found a bad entry, a folder that cannot be read), 2 usage error.\n";

struct Command {
  std::string name;
  std::optional<std::string> dir;
  std::optional<std::string> max_size;
  bool help = false;
};

absl::StatusOr<Command> ParseArgs(absl::Span<const std::string> args) {
  Command command;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      command.help = true;
      continue;
    }
    if (!absl::StartsWith(arg, "-")) {
      if (!command.name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("one command at a time: got '", command.name, "' and '", arg, "'"));
      }
      command.name = std::string(arg);
      continue;
    }
    absl::string_view flag = arg;
    std::optional<std::string> value;
    if (const size_t equals = arg.find('='); equals != absl::string_view::npos) {
      flag = arg.substr(0, equals);
      value = std::string(arg.substr(equals + 1));
    }
    std::optional<std::string>* target = nullptr;
    if (flag == "--dir") target = &command.dir;
    if (flag == "--max-size") target = &command.max_size;
    if (target == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    if (!value.has_value()) {
      if (i + 1 == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      }
      value = args[++i];
    }
    if (value->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    *target = std::move(value);
  }
  if (command.help) return command;
  if (command.name.empty()) {
    return absl::InvalidArgumentError("no command: expected stats, list, verify, prune or clear");
  }
  for (absl::string_view known : {"stats", "list", "verify", "prune", "clear"}) {
    if (command.name == known) {
      if (command.max_size.has_value() && command.name != "prune") {
        return absl::InvalidArgumentError("--max-size goes with prune only");
      }
      if (command.max_size.has_value()) {  // Checked here: a bad value is a usage error.
        if (absl::Status size = runtime::ParseByteSize(*command.max_size).status(); !size.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("--max-size: ", size.message()));
        }
      }
      return command;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown command '", command.name, "': expected stats, list, verify, prune or clear"));
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (int64_t{1} << 20)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  if (bytes < (int64_t{1} << 30)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

absl::StatusOr<std::string> ResolveDir(const Command& command,
                                       const runtime::CacheEnvironment& env) {
  if (command.dir.has_value()) return *command.dir;
  runtime::CacheEnvironment folder_only = env;
  folder_only.max_bytes.reset();  // A bad cap is reported where the cap is used.
  absl::StatusOr<runtime::CacheConfig> config = runtime::ResolveCacheConfig(folder_only);
  if (!config.ok()) return config.status();
  if (!config->enabled) {
    return absl::FailedPreconditionError(
        "the kernel cache is off (REPRISE_CACHE_DIR=off): pass --dir to name a folder");
  }
  return config->dir;
}

absl::StatusOr<int64_t> ResolveCap(const Command& command, const runtime::CacheEnvironment& env) {
  if (command.max_size.has_value()) {
    absl::StatusOr<int64_t> cap = runtime::ParseByteSize(*command.max_size);
    if (!cap.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--max-size: ", cap.status().message()));
    }
    return *cap;
  }
  if (env.max_bytes.has_value() && !env.max_bytes->empty()) {
    absl::StatusOr<int64_t> cap = runtime::ParseByteSize(*env.max_bytes);
    if (!cap.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("REPRISE_CACHE_MAX_BYTES: ", cap.status().message()));
    }
    return *cap;
  }
  return runtime::kDefaultCacheMaxBytes;
}

// The folder's listing; a folder that does not exist yet (a machine that never compiled a kernel)
// is an empty cache, not an error.
absl::StatusOr<runtime::CacheListing> ListOrEmpty(const std::string& dir, bool& missing) {
  absl::StatusOr<runtime::CacheListing> listing = runtime::ListCacheFolder(dir);
  missing = absl::IsNotFound(listing.status());
  if (missing) return runtime::CacheListing();
  return listing;
}

absl::Status Stats(const std::string& dir, int64_t cap, std::string& out) {
  bool missing = false;
  absl::StatusOr<runtime::CacheListing> listing = ListOrEmpty(dir, missing);
  if (!listing.ok()) return listing.status();
  absl::StrAppendFormat(&out, "folder           %s%s\n", dir,
                        missing ? " (does not exist yet)" : "");
  absl::StrAppendFormat(&out, "entries          %d\n", listing->entries.size());
  absl::StrAppendFormat(&out, "bytes            %d (%s)\n", listing->entry_bytes,
                        HumanBytes(listing->entry_bytes));
  absl::StrAppendFormat(&out, "cap              %d (%s)\n", cap, HumanBytes(cap));
  absl::StrAppendFormat(&out, "temporary files  %d\n", listing->temporaries.size());
  return absl::OkStatus();
}

absl::Status List(const std::string& dir, std::string& out) {
  bool missing = false;
  absl::StatusOr<runtime::CacheListing> listing = ListOrEmpty(dir, missing);
  if (!listing.ok()) return listing.status();
  absl::StrAppendFormat(&out, "%-64s  %-32s  %-8s  %10s  %10s  %s\n", "key", "kernel", "arch",
                        "cubin", "ptx", "last use (UTC)");
  for (const runtime::CacheFile& entry : listing->entries) {
    const std::string last_use =
        absl::FormatTime("%Y-%m-%d %H:%M:%S", entry.last_use, absl::UTCTimeZone());
    absl::StatusOr<std::string> bytes = runtime::ReadCacheFile(entry.path, false, nullptr);
    if (absl::IsNotFound(bytes.status())) continue;
    absl::StatusOr<runtime::KernelBinary> binary =
        bytes.ok() ? runtime::DecodeCacheEntry(*bytes, entry.key)
                   : absl::StatusOr<runtime::KernelBinary>(bytes.status());
    if (!binary.ok()) {
      absl::StrAppendFormat(&out, "%-64s  BAD: %s  %s\n", entry.key, binary.status().message(),
                            last_use);
      continue;
    }
    absl::StrAppendFormat(&out, "%-64s  %-32s  %-8s  %10d  %10d  %s\n", entry.key, binary->name,
                          binary->arch, binary->cubin.size(), binary->ptx.size(), last_use);
  }
  return absl::OkStatus();
}

absl::Status Verify(const std::string& dir, std::string& out) {
  absl::StatusOr<runtime::VerifyResult> result = runtime::VerifyCacheFolder(dir);
  if (absl::IsNotFound(result.status())) {
    absl::StrAppendFormat(&out, "0 entries ok, 0 bad in %s (does not exist yet)\n", dir);
    return absl::OkStatus();
  }
  if (!result.ok()) return result.status();
  for (const runtime::BadCacheEntry& bad : result->bad) {
    absl::StrAppendFormat(&out, "BAD %s: %s\n", bad.path, bad.problem.message());
  }
  absl::StrAppendFormat(&out, "%d entries ok, %d bad in %s\n", result->good, result->bad.size(),
                        dir);
  if (!result->bad.empty()) {
    return absl::DataLossError(absl::StrCat(
        result->bad.size(), " bad entries in ", dir,
        " (a run deletes and recompiles them when it meets them; `clear` removes everything)"));
  }
  return absl::OkStatus();
}

absl::Status Run(const Command& command, const runtime::CacheEnvironment& env, absl::Time now,
                 std::string& out) {
  absl::StatusOr<std::string> dir = ResolveDir(command, env);
  if (!dir.ok()) return dir.status();
  if (command.name == "list") return List(*dir, out);
  if (command.name == "verify") return Verify(*dir, out);
  if (command.name == "clear") {
    absl::StatusOr<runtime::PruneResult> cleared = runtime::ClearCacheFolder(*dir);
    if (absl::IsNotFound(cleared.status())) {
      absl::StrAppendFormat(&out, "nothing to clear: no folder at %s\n", *dir);
      return absl::OkStatus();
    }
    if (!cleared.ok()) return cleared.status();
    absl::StrAppendFormat(&out, "removed %d entries (%s) and %d temporary files from %s\n",
                          cleared->removed_entries, HumanBytes(cleared->removed_bytes),
                          cleared->removed_temporaries, *dir);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> cap = ResolveCap(command, env);
  if (!cap.ok()) return cap.status();
  if (command.name == "stats") return Stats(*dir, *cap, out);
  absl::StatusOr<runtime::PruneResult> pruned = runtime::PruneCacheFolder(*dir, *cap, now);
  if (absl::IsNotFound(pruned.status())) {
    absl::StrAppendFormat(&out, "nothing to prune: no folder at %s\n", *dir);
    return absl::OkStatus();
  }
  if (!pruned.ok()) return pruned.status();
  absl::StrAppendFormat(&out,
                        "removed %d entries (%s) and %d stale temporary files; kept %d entries "
                        "(%s) under the cap of %s\n",
                        pruned->removed_entries, HumanBytes(pruned->removed_bytes),
                        pruned->removed_temporaries, pruned->kept_entries,
                        HumanBytes(pruned->kept_bytes), HumanBytes(*cap));
  return absl::OkStatus();
}

}  // namespace

CacheToolResult RunCacheTool(absl::Span<const std::string> args,
                             const runtime::CacheEnvironment& env, absl::Time now) {
  CacheToolResult result;
  absl::StatusOr<Command> command = ParseArgs(args);
  if (!command.ok()) {
    result.exit_code = 2;
    result.err = absl::StrCat("reprise-cache: ", command.status().message(), "\n", kUsage);
    return result;
  }
  if (command->help) {
    result.out = std::string(kUsage);
    return result;
  }
  if (absl::Status status = Run(*command, env, now, result.out); !status.ok()) {
    result.exit_code = 1;
    result.err = absl::StrCat("reprise-cache: ", status.message(), "\n");
  }
  return result;
}

}  // namespace reprise::tools
