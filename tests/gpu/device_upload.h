// Host data in a new device buffer for a GPU test, the copy finished: a pageable cudaMemcpy runs
// on the legacy stream, which reprise's streams do not wait for (docs/testing.md, "Uploads in GPU
// tests").
#ifndef REPRISE_TESTS_GPU_DEVICE_UPLOAD_H_
#define REPRISE_TESTS_GPU_DEVICE_UPLOAD_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::testing {

template <typename T>
absl::StatusOr<runtime::DeviceBuffer> UploadToDevice(const std::vector<T>& host) {
  const size_t bytes = host.size() * sizeof(T);
  ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(bytes));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.data(), host.data(), bytes, cudaMemcpyHostToDevice),
                       "upload");
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy), "upload");
  return buffer;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_DEVICE_UPLOAD_H_
