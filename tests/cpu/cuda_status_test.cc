// CUDA, driver and library return codes as Statuses: the call and its context named, and the
// codes that mean "no usable GPU here" (none present, no driver, or only the toolkit's stub of the
// driver library, as in a container without the host's driver) as FAILED_PRECONDITION, which
// VisibleDeviceCount turns into zero devices rather than an error.
#include "src/runtime/cuda_status.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/device.h"

namespace reprise::runtime {
namespace {

using ::testing::HasSubstr;

TEST(CudaStatusTest, NamesTheCallAndTheContext) {
  const absl::Status status = CudaStatus(cudaErrorInvalidValue, "cudaMemcpy", "node 'fc0'");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("node 'fc0': cudaMemcpy failed"));
  EXPECT_TRUE(CudaStatus(cudaSuccess, "cudaMemcpy").ok());
}

TEST(CudaStatusTest, NoUsableGpuIsAFailedPrecondition) {
  for (cudaError_t code : {cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary}) {
    EXPECT_EQ(CudaStatus(code, "cudaGetDeviceCount").code(), absl::StatusCode::kFailedPrecondition)
        << cudaGetErrorName(code);
  }
  for (CUresult code : {CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY}) {
    EXPECT_EQ(CudaStatus(code, "cuInit").code(), absl::StatusCode::kFailedPrecondition) << code;
  }
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc").code(),
            absl::StatusCode::kResourceExhausted);
}

// Whatever this machine has (a GPU, none, no driver, the stub driver), the count is a number.
TEST(CudaStatusTest, VisibleDeviceCountIsNeverAnError) {
  const absl::StatusOr<int> count = VisibleDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_GE(*count, 0);
}

}  // namespace
}  // namespace reprise::runtime
