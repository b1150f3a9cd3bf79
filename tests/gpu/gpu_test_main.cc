// The GPU test binary's main: runs every test as gtest_main would, then prints one line saying
// how many tests ran and how many were skipped and why, e.g.
//   GPU tests: 0 ran, 532 skipped (no CUDA device: cudaErrorNoDevice: no CUDA-capable device is
//   detected); CPU-only run
//   GPU tests: 530 ran, 2 skipped (2x needs 2 GPUs, 1 visible)
// and writes it to the file named by REPRISE_TEST_SUMMARY (cmake/test_summary.cmake has CTest print
// it after the tests). "CPU-only run" is written only when no device is visible and nothing
// failed: CTest marks the binary Skipped on it, and a failure must never read as a skip.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::testing {
namespace {

// The message of the skip that ended a test ("no CUDA device visible: ..."), first line only.
std::string SkipMessage(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string message = part.message();
    if (const size_t newline = message.find('\n'); newline != std::string::npos) {
      message.resize(newline);
    }
    return message.empty() ? "no reason given" : message;
  }
  return "no reason given";
}

// The summary line of a finished run of `unit`, given why no device is visible (empty if one is).
std::string SummaryLine(const ::testing::UnitTest& unit, const std::string& no_gpu) {
  int ran = 0, skipped = 0;
  std::map<std::string, int> reasons;  // Skips other than for the missing device, by message.
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      if (!info.should_run()) continue;
      if (!info.result()->Skipped()) {
        ++ran;
        continue;
      }
      ++skipped;
      const std::string message = SkipMessage(*info.result());
      if (no_gpu.empty() || message.rfind("no CUDA device visible", 0) != 0) ++reasons[message];
    }
  }
  std::vector<std::string> why;
  if (!no_gpu.empty()) why.push_back(absl::StrCat("no CUDA device: ", no_gpu));
  for (const auto& [message, count] : reasons) why.push_back(absl::StrCat(count, "x ", message));
  std::string line = absl::StrCat("GPU tests: ", ran, " ran, ", skipped, " skipped");
  if (skipped > 0) absl::StrAppend(&line, " (", absl::StrJoin(why, "; "), ")");
  if (unit.failed_test_count() > 0)
    absl::StrAppend(&line, ", ", unit.failed_test_count(), " FAILED");
  if (!no_gpu.empty() && unit.Passed()) absl::StrAppend(&line, "; CPU-only run");
  return line;
}

// Abseil's failure handler prints the faulting PC but cannot walk a stack built without frame
// pointers; glibc's backtrace() follows the unwind tables. OnSegv prints that stack (addresses that
// addr2line -f -C -e reprise_gpu_tests turns into functions), then runs Abseil's handler.
struct sigaction abseil_segv;
void OnSegv(int signal, siginfo_t* info, void* context) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char header[] = "*** stack (glibc backtrace) ***\n";
  (void)!write(STDERR_FILENO, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  abseil_segv.sa_sigaction(signal, info, context);
}

}  // namespace
}  // namespace reprise::testing

int main(int argc, char** argv) {
  // A crash prints its signal and a symbolised stack instead of a bare "Segmentation fault".
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler({});
  sigaction(SIGSEGV, nullptr, &reprise::testing::abseil_segv);
  struct sigaction on_segv = {};
  on_segv.sa_flags = SA_SIGINFO;
  on_segv.sa_sigaction = reprise::testing::OnSegv;
  sigaction(SIGSEGV, &on_segv, nullptr);
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (GTEST_FLAG_GET(list_tests)) return status;  // Nothing ran: no summary.
  const std::string line = reprise::testing::SummaryLine(unit, reprise::testing::NoGpuReason());
  std::printf("%s\n", line.c_str());
  if (const char* path = std::getenv("REPRISE_TEST_SUMMARY"); path != nullptr && *path != '\0') {
    if (std::FILE* file = std::fopen(path, "w"); file != nullptr) {
      std::fprintf(file, "%s\n", line.c_str());
      std::fclose(file);
    } else {
      std::fprintf(stderr, "cannot write the test summary to %s\n", path);
    }
  }
  return status;
}
