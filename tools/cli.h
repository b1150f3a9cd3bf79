// The command line every reprise tool and example shares: a usage line, --help and -h listing the
// program's own flags, --version with reprise's version and build type, positional arguments
// refused, flag values checked before any device work, and one rule for exit codes
// (docs/command_line.md):
//   0  the program did what it was asked
//   1  it failed (a CUDA error, no GPU, a file that cannot be written, a difference found)
//   2  the command line is wrong (an unknown flag, a bad value, a stray argument)
//
//   constexpr reprise::cli::Program kProgram = {"train_mlp", "[--steps N] [--batch N] ...",
//                                               __FILE__};
//   int main(int argc, char** argv) {
//     reprise::cli::ParseCommandLine(argc, argv, kProgram);  // Exits on --help, -h, --version.
//     reprise::cli::CheckFlags(kProgram, {reprise::cli::AtLeast("batch", FLAGS_batch, 1)});
//     return reprise::cli::Finish(kProgram, Train());
//   }
#ifndef REPRISE_TOOLS_CLI_H_
#define REPRISE_TOOLS_CLI_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "reprise/progress.h"

namespace reprise::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Whether two __FILE__ names are one file: equal, or the longer ends with "/" and the shorter.
// Abseil may hand a flag's file name back normalised (a build that compiles through relative
// paths, as a compiler cache does, loses its leading "../").
inline bool SameSourceFile(absl::string_view a, absl::string_view b) {
  if (a.size() < b.size()) std::swap(a, b);
  if (a == b) return true;
  return !b.empty() && a.substr(a.size() - b.size()) == b && a[a.size() - b.size() - 1] == '/';
}

struct Program {
  const char* name;    // As installed: "reprise-bench", "train_mlp".
  const char* usage;   // The arguments after the name, for the usage line.
  const char* source;  // __FILE__ of the file that defines the program's flags.
  // __FILE__ of a second file whose flags are the program's too (a group split out by job).
  const char* more_flags = nullptr;

  bool DefinesFlagsIn(absl::string_view file) const {
    return SameSourceFile(file, source) ||
           (more_flags != nullptr && SameSourceFile(file, more_flags));
  }
};

// "reprise-bench (reprise 0.4.0, Release build, assertions off, CUDA 13.0)".
std::string VersionText(absl::string_view name);

// The usage line and every flag defined in program.source: name, help and default.
std::string HelpText(const Program& program);

// Parses argv with Abseil flags. --help, -h (and -help, --helpfull, --helpshort) print HelpText
// to stdout and exit 0; --version prints VersionText and exits 0; an unknown flag, a value that
// does not parse, or any positional argument exits 2 with a message on stderr.
void ParseCommandLine(int argc, char** argv, const Program& program);

// Exits 2 with "<name>: <first error>; see --help" on stderr when any check failed.
void CheckFlags(const Program& program, std::initializer_list<absl::Status> checks);

// Checks for CheckFlags, each naming the flag in its message.
absl::Status InRange(absl::string_view flag, int64_t value, int64_t min, int64_t max);
absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min);
absl::Status NonNegative(absl::string_view flag, double value);
absl::Status OneOf(absl::string_view flag, absl::string_view value,
                   std::initializer_list<absl::string_view> choices);
absl::Status OneOf(absl::string_view flag, int64_t value, std::initializer_list<int64_t> choices);
template <typename T>
absl::Status InRange(absl::string_view flag, const absl::Flag<T>& f, int64_t min, int64_t max) {
  return InRange(flag, absl::GetFlag(f), min, max);
}
template <typename T>
absl::Status AtLeast(absl::string_view flag, const absl::Flag<T>& f, int64_t min) {
  return AtLeast(flag, absl::GetFlag(f), min);
}
inline absl::Status OneOf(absl::string_view flag, const absl::Flag<int>& f,
                          std::initializer_list<int64_t> choices) {
  return OneOf(flag, absl::GetFlag(f), choices);
}
inline absl::Status OneOf(absl::string_view flag, const absl::Flag<std::string>& f,
                          std::initializer_list<absl::string_view> choices) {
  return OneOf(flag, absl::GetFlag(f), choices);
}

// A TrainOptions::on_compile_progress that prints "<name>: kernels 12/80 ready (3.1 s)" on
// stderr once compilation has taken longer than a second (a start from the kernel cache stays
// silent): updated in place on a terminal, else a line every few seconds, and the last one when
// all are ready. Safe to share between trainers created at once.
CompileProgressCallback CompileProgressPrinter(absl::string_view name);

// The program's exit code for the outcome of its work: 0 when `status` is OK, else 1 after
// printing "<name>: <status>" on stderr.
int Finish(const Program& program, const absl::Status& status);

}  // namespace reprise::cli

#endif  // REPRISE_TOOLS_CLI_H_
