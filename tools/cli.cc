#include "tools/cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

#ifndef REPRISE_VERSION
#define REPRISE_VERSION "unknown"
#endif
#ifndef REPRISE_BUILD_TYPE
#define REPRISE_BUILD_TYPE "unknown"
#endif
#ifndef REPRISE_CUDA_VERSION
#define REPRISE_CUDA_VERSION "unknown"
#endif

namespace reprise::cli {
namespace {

// Abseil reports a bad flag and then calls exit(1), whatever the version; a usage error must exit
// 2. While ParseCommandLine runs, an atexit handler turns that exit into _exit(2) (the one way
// to change the status of an exit already under way).
std::atomic<bool> g_parsing{false};
const char* g_program_name = "";

void ExitTwoIfParsing() {
  if (!g_parsing.load()) return;
  std::fprintf(stderr, "%s: see --help for the flags\n", g_program_name);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(kExitUsage);
}

// The flag name of `arg` ("--help=x" -> "help"), or empty when it is not a flag.
absl::string_view FlagName(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return "";
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

[[noreturn]] void UsageError(const Program& program, absl::string_view message) {
  std::fprintf(stderr, "%s: %.*s; see --help\n", program.name, static_cast<int>(message.size()),
               message.data());
  std::exit(kExitUsage);
}

}  // namespace

std::string VersionText(absl::string_view name) {
#ifdef NDEBUG
  constexpr const char* kAssertions = "assertions off";
#else
  constexpr const char* kAssertions = "assertions on";
#endif
  return absl::StrCat(name, " (reprise ", REPRISE_VERSION, ", ", REPRISE_BUILD_TYPE, " build, ",
                      kAssertions, ", built with CUDA ", REPRISE_CUDA_VERSION, ")");
}

std::string HelpText(const Program& program) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (program.DefinesFlagsIn(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string text = absl::StrCat("usage: ", program.name, " ", program.usage, "\n\nflags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(&text, "  --", flag->Name(), "  ", flag->Help(),
                    " (default: ", flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(),
                    ")\n");
  }
  absl::StrAppend(&text,
                  "  --help, -h  this text\n"
                  "  --version  reprise's version and build type\n"
                  "\nexit status: 0 ok, 1 failure, 2 usage error (docs/command_line.md)\n");
  return text;
}

void ParseCommandLine(int argc, char** argv, const Program& program) {
  absl::SetProgramUsageMessage(absl::StrCat(program.name, " ", program.usage));
  // Abseil's own --helpfull and --helpshort then list this program's flags too: by default it
  // matches the source file's name against the program's, and reprise-bench is reprise_bench.cc.
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [program](absl::string_view file) {
    return program.DefinesFlagsIn(file);
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  const std::string name = program.name;
  config.version_string = [name] { return VersionText(name) + "\n"; };
  absl::SetFlagsUsageConfig(config);

  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    const absl::string_view flag = FlagName(arg);
    if (flag == "h" || absl::StartsWith(flag, "help")) {
      std::fputs(HelpText(program).c_str(), stdout);
      std::exit(kExitOk);
    }
    if (flag == "version") {
      std::printf("%s\n", VersionText(program.name).c_str());
      std::exit(kExitOk);
    }
  }
  g_program_name = program.name;
  static const bool registered = std::atexit(ExitTwoIfParsing) == 0;
  (void)registered;
  g_parsing.store(true);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  g_parsing.store(false);
  if (rest.size() > 1) {
    UsageError(program, absl::StrCat("unexpected argument(s) '",
                                     absl::StrJoin(rest.begin() + 1, rest.end(), "' '"),
                                     "': every option is a --flag"));
  }
}

void CheckFlags(const Program& program, std::initializer_list<absl::Status> checks) {
  for (const absl::Status& check : checks) {
    if (!check.ok()) UsageError(program, check.message());
  }
}

absl::Status InRange(absl::string_view flag, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be from ", min, " to ", max, ", not ", value));
}

absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, ", not ", value));
}

absl::Status NonNegative(absl::string_view flag, double value) {
  if (value >= 0) return absl::OkStatus();  // NaN fails too.
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be 0 or more, not ", value));
}

absl::Status OneOf(absl::string_view flag, absl::string_view value,
                   std::initializer_list<absl::string_view> choices) {
  for (absl::string_view choice : choices) {
    if (value == choice) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", absl::StrJoin(choices, ", "), ", not '", value, "'"));
}

absl::Status OneOf(absl::string_view flag, int64_t value, std::initializer_list<int64_t> choices) {
  for (int64_t choice : choices) {
    if (value == choice) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", absl::StrJoin(choices, ", "), ", not ", value));
}

CompileProgressCallback CompileProgressPrinter(absl::string_view name) {
  struct State {
    absl::Mutex mu;
    std::string name;
    bool terminal = isatty(STDERR_FILENO) == 1;
    bool open_line = false;       // A terminal line written in place, not yet ended.
    double last_printed_s = -10;  // When the last line was printed (not on a terminal).
  };
  auto state = std::make_shared<State>();
  state->name = std::string(name);
  return [state](const CompileProgress& p) {
    absl::MutexLock lock(&state->mu);
    const bool last = p.done == p.total;
    if (p.elapsed_s < 1.0 && !(last && state->open_line)) return;
    if (state->terminal) {
      std::fprintf(stderr, "\r%s: kernels %lld/%lld ready (%.1f s)%s", state->name.c_str(),
                   static_cast<long long>(p.done), static_cast<long long>(p.total), p.elapsed_s,
                   last ? "\n" : "");
      state->open_line = !last;
    } else if (last || p.elapsed_s - state->last_printed_s >= 5.0) {
      std::fprintf(stderr, "%s: kernels %lld/%lld ready (%.1f s)\n", state->name.c_str(),
                   static_cast<long long>(p.done), static_cast<long long>(p.total), p.elapsed_s);
      state->last_printed_s = p.elapsed_s;
    }
    std::fflush(stderr);
  };
}

int Finish(const Program& program, const absl::Status& status) {
  if (status.ok()) return kExitOk;
  std::fprintf(stderr, "%s: %s\n", program.name, status.ToString().c_str());
  return kExitFailure;
}

}  // namespace reprise::cli
