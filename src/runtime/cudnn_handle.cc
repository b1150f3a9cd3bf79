#include "src/runtime/cudnn_handle.h"

#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

absl::StatusOr<CudnnHandle> CudnnHandle::Create() {
  cudnnHandle_t handle = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudnnCreate(&handle), "cudnnCreate"));
  return CudnnHandle(handle);
}

absl::Status CudnnHandle::Bind(cudaStream_t stream, absl::string_view context) const {
  return CudaStatus(cudnnSetStream(handle_.get(), stream), "cudnnSetStream", context);
}

void CudnnHandle::Deleter::operator()(cudnnHandle_t handle) const { cudnnDestroy(handle); }

}  // namespace reprise::runtime
