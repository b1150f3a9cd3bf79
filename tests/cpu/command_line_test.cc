// Every tool and example, run as a user runs it (the built binaries beside this test, listed by
// cmake/cli.cmake): --help and -h print its usage and its own flags and exit 0; --version names
// reprise's version and the build type; a flag value out of range, an unknown flag, a value that
// does not parse and a stray argument exit 2 with a message, before any device work (no GPU is
// needed for any of this, so a check made after the device check would exit 1 here).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifndef REPRISE_CLI_PROGRAMS
#error "cmake/cli.cmake defines REPRISE_CLI_PROGRAMS for this file"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path SelfDirectory() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

// Runs `program` (beside this test) with `args` (shell words), capturing both streams.
ProgramRun RunProgram(const std::string& program, const std::string& args) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("reprise_cli_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::string command =
      absl::StrCat("'", (SelfDirectory() / program).string(), "' ", args, " >'",
                   (dir / "out").string(), "' 2>'", (dir / "err").string(), "' </dev/null");
  const int status = std::system(command.c_str());
  ProgramRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = ReadAll(dir / "out");
  run.err = ReadAll(dir / "err");
  std::filesystem::remove_all(dir);
  return run;
}

// Per program: one of its own flags that --help must list, and arguments whose value is out of
// range. A new tool or example must add its row (the test fails naming it otherwise).
struct Expectations {
  std::string own_flag;
  std::string out_of_range;
  std::string message;  // In the out-of-range call's stderr.
};
const std::map<std::string, Expectations>& Table() {
  static const auto* table = new std::map<std::string, Expectations>{
      {"train_mlp", {"--print_every", "--print_every 0", "--print_every must be at least 1"}},
      {"train_resnet", {"--image_size", "--depth -3", "--depth must be 18, 34, 50, 101, 152"}},
      {"train_ensemble", {"--models", "--models=0", "--models must be at least 1"}},
      {"train_gpt2", {"--eval_every", "--dtype f8", "--dtype must be bf16, f32"}},
      {"reprise-bench", {"--fusion", "--batch 0", "--batch must be at least 1"}},
      {"reprise-dp-bench", {"--launcher", "--lanes 9", "--lanes must be from 0 to 4"}},
      {"reprise-update-bench", {"--recapture_reps", "--reps 0", "--reps must be at least 1"}},
      {"reprise-optimizer-bench", {"--copy_mib", "--models resnet50,vgg", "unknown model 'vgg'"}},
      {"reprise-dump", {"--max_nodes", "--max_nodes -5", "--max_nodes must be at least -1"}},
      {"reprise-cache", {"--max-size", "--dir /tmp prune --max-size lots", "not a byte size"}},
  };
  return *table;
}

std::vector<std::string> Programs() {
  return absl::StrSplit(REPRISE_CLI_PROGRAMS, ',', absl::SkipEmpty());
}

class CommandLineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(SelfDirectory() / GetParam()))
        << GetParam() << " is not built beside this test (cmake/cli.cmake makes it a dependency)";
    ASSERT_TRUE(Table().contains(GetParam()))
        << "add a row for " << GetParam() << " to Table() in " << __FILE__;
  }
  const Expectations& expect() const { return Table().at(GetParam()); }
};

TEST_P(CommandLineTest, HelpListsItsOwnFlagsAndExitsZero) {
  for (const char* flag : {"--help", "-h"}) {
    const ProgramRun run = RunProgram(GetParam(), flag);
    EXPECT_EQ(run.exit_code, 0) << flag << "\n" << run.err;
    EXPECT_THAT(run.out, StartsWith("usage: " + GetParam())) << flag;
    EXPECT_THAT(run.out, HasSubstr(expect().own_flag)) << flag;
    EXPECT_THAT(run.out, HasSubstr("--version")) << flag;
    EXPECT_THAT(run.out, HasSubstr("2 usage error")) << flag;
    EXPECT_THAT(run.out, Not(HasSubstr("No flags matched"))) << flag;
    EXPECT_THAT(run.err, IsEmpty()) << flag;
  }
}

TEST_P(CommandLineTest, VersionNamesReprisesVersionAndTheBuildType) {
  const ProgramRun run = RunProgram(GetParam(), "--version");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith(absl::StrCat(GetParam(), " (reprise ", REPRISE_VERSION, ", ",
                                               REPRISE_BUILD_TYPE, " build, ")));
  EXPECT_THAT(run.out, Not(HasSubstr("Debug build (NDEBUG not #defined)")));
}

TEST_P(CommandLineTest, OutOfRangeValueIsAUsageError) {
  const ProgramRun run = RunProgram(GetParam(), expect().out_of_range);
  EXPECT_EQ(run.exit_code, 2) << expect().out_of_range << "\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr(expect().message)) << expect().out_of_range;
  EXPECT_THAT(run.err, Not(HasSubstr("CUDA"))) << "checked before any device work";
}

TEST_P(CommandLineTest, UnknownFlagIsAUsageError) {
  const ProgramRun run = RunProgram(GetParam(), "--no_such_flag=1");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("no_such_flag"));
}

TEST_P(CommandLineTest, StrayArgumentIsAUsageError) {
  // reprise-cache takes one command; a second one is the stray argument.
  const std::string args = GetParam() == "reprise-cache" ? "stats stray" : "stray";
  const ProgramRun run = RunProgram(GetParam(), args);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("stray"));
}

// reprise-bench's kernel flags (tools/bench_kernel_flags.cc) are checked with its own.
TEST(CommandLineBenchTest, KernelFlagsAreCheckedBeforeAnyDeviceWork) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--conv_api foo", "--conv_api must be legacy or graph, not 'foo'"},
           {"--gelu_product_library cudann",
            "--gelu_product_library must be fastest, cublaslt or cudnn, not 'cudann'"},
           {"--residual_sums_min_elements -1",
            "--residual_sums_min_elements must be at least 0"}}) {
    const ProgramRun run = RunProgram("reprise-bench", args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(message)) << args;
    EXPECT_THAT(run.err, Not(HasSubstr("CUDA"))) << args;
  }
}

TEST(CommandLineListTest, EveryProgramIsTested) {
  // The list comes from the tools/reprise_*.cc and examples/*.cc files themselves.
  EXPECT_GE(Programs().size(), Table().size());
  for (const auto& [name, expectations] : Table()) {
    EXPECT_THAT(Programs(), ::testing::Contains(name));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryProgram, CommandLineTest, ::testing::ValuesIn(Programs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
