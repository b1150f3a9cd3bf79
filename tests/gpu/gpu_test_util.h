// Helpers for tests that need a GPU: skip cleanly where there is none, and check every CUDA call.
#ifndef REPRISE_TESTS_GPU_GPU_TEST_UTIL_H_
#define REPRISE_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise::testing {

// Empty when a device is visible; otherwise why not.
inline std::string NoGpuReason() {
  absl::StatusOr<int> count = runtime::VisibleDeviceCount();
  if (!count.ok()) return std::string(count.status().message());
  if (*count > 0) return "";
  int unused = 0;
  const cudaError_t result = cudaGetDeviceCount(&unused);
  (void)cudaGetLastError();
  if (result == cudaSuccess) return "the driver reports 0 devices";
  return absl::StrCat(cudaGetErrorName(result), ": ", cudaGetErrorString(result));
}

// Whether the test runs under compute-sanitizer (tools/device/gpu_suite_sanitized.sh sets
// REPRISE_UNDER_COMPUTE_SANITIZER to the tool's name), where long runs take a few steps instead.
inline bool UnderComputeSanitizer() {
  return std::getenv("REPRISE_UNDER_COMPUTE_SANITIZER") != nullptr;
}

// Whether the test runs under compute-sanitizer's racecheck. compute-sanitizer lists dynamic
// parallelism (launches made on the device, which a device-launched graph is) among what racecheck
// does not support: a device-launched step ended there in an illegal address that no plain or
// memcheck run shows, while the same step launched from the host passed it with no hazard.
inline bool UnderRacecheck() {
  const char* tool = std::getenv("REPRISE_UNDER_COMPUTE_SANITIZER");
  return tool != nullptr && absl::string_view(tool) == "racecheck";
}

// What REPRISE_ASSERT_OK checks: a Status as is, a CUDA-family code through CudaStatus.
inline absl::Status ToStatus(absl::Status status, absl::string_view) { return status; }
template <typename Code>
absl::Status ToStatus(Code code, absl::string_view call) {
  return runtime::CudaStatus(code, call);
}

}  // namespace reprise::testing

// Skips the current test unless a CUDA device is visible.
#define REPRISE_REQUIRE_GPU()                                                 \
  do {                                                                        \
    if (const std::string reprise_no_gpu = ::reprise::testing::NoGpuReason(); \
        !reprise_no_gpu.empty()) {                                            \
      GTEST_SKIP() << "no CUDA device visible: " << reprise_no_gpu;           \
    }                                                                         \
  } while (false)

// Asserts that an absl::Status or any CUDA, driver, cuBLAS, NVRTC or cuDNN code is a success.
#define REPRISE_ASSERT_OK(expr)                                                        \
  do {                                                                                 \
    const ::absl::Status reprise_status = ::reprise::testing::ToStatus((expr), #expr); \
    ASSERT_TRUE(reprise_status.ok()) << reprise_status;                                \
  } while (false)

// `REPRISE_ASSERT_OK_AND_ASSIGN(auto x, MakeX());` declares x or fails the test.
#define REPRISE_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  REPRISE_ASSERT_OK_AND_ASSIGN_IMPL(REPRISE_CONCAT(reprise_statusor_, __LINE__), lhs, expr)
#define REPRISE_ASSERT_OK_AND_ASSIGN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                      \
  ASSERT_TRUE(statusor.ok()) << statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // REPRISE_TESTS_GPU_GPU_TEST_UTIL_H_
