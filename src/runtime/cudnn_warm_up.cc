#include "src/runtime/cudnn_warm_up.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

absl::Status WarmUpInThrowawayCapture(const CudnnHandle& handle, size_t placeholder_bytes,
                                      absl::FunctionRef<void(void* placeholder)> first_run,
                                      absl::string_view context) {
  cudaStream_t original = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudnnGetStream(handle.get(), &original), "cudnnGetStream", context));
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::OkStatus();
  }
  void* placeholder = nullptr;
  if ((placeholder_bytes == 0 ||
       cudaMalloc(&placeholder, placeholder_bytes + (1 << 20)) == cudaSuccess) &&
      cudnnSetStream(handle.get(), stream) == CUDNN_STATUS_SUCCESS &&
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess) {
    first_run(placeholder);
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) {
      cudaGraphDestroy(graph);
    }
  }
  (void)cudaGetLastError();  // What the discarded capture left behind is not the caller's.
  const absl::Status restored =
      CudaStatus(cudnnSetStream(handle.get(), original), "cudnnSetStream", context);
  if (placeholder != nullptr) cudaFree(placeholder);
  cudaStreamDestroy(stream);
  (void)cudaGetLastError();
  return restored;
}

}  // namespace reprise::runtime
