// Turns CUDA runtime, driver, cuBLAS(Lt), NVRTC and cuDNN result codes into absl::Status.
// The message names the failing call and what the engine was doing, so that a test can assert
// StatusIs(code, HasSubstr(node_name)):
//
//   "node 'fc1/matmul': cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED: the functionality ..."
//
// Codes: out of memory -> kResourceExhausted; no device or a driver too old -> kFailedPrecondition;
// an invalid value or argument -> kInvalidArgument; anything else -> kInternal. Success -> OK.
#ifndef REPRISE_SRC_RUNTIME_CUDA_STATUS_H_
#define REPRISE_SRC_RUNTIME_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

// `call` names the API call (or the work, e.g. "kernel launch"); `context` says for what, e.g.
// "node 'relu_3'". An empty context drops the "<context>: " prefix.
absl::Status CudaStatus(cudaError_t code, absl::string_view call, absl::string_view context = "");
absl::Status CudaStatus(CUresult code, absl::string_view call, absl::string_view context = "");
absl::Status CudaStatus(cublasStatus_t code, absl::string_view call,
                        absl::string_view context = "");
absl::Status CudaStatus(nvrtcResult code, absl::string_view call, absl::string_view context = "");
absl::Status CudaStatus(cudnnStatus_t code, absl::string_view call, absl::string_view context = "");

}  // namespace reprise::runtime

// Evaluates `expr` (any of the five code types) once and returns a Status from the enclosing
// function when it failed; the call is named by the text of `expr`.
//   CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n, stream), "zeroing the arena");
#define CUDA_RETURN_IF_ERROR(expr, context) \
  RETURN_IF_ERROR(::reprise::runtime::CudaStatus((expr), #expr, (context)))

#endif  // REPRISE_SRC_RUNTIME_CUDA_STATUS_H_
