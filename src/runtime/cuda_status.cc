#include "src/runtime/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/runtime/device.h"

namespace reprise::runtime {
namespace {

// "<context>: <call> failed: <name>: <description>"; the description is dropped where a library
// only gives a name.
absl::Status MakeStatus(absl::StatusCode code, absl::string_view call, absl::string_view context,
                        absl::string_view name, absl::string_view description) {
  std::string message;
  if (!context.empty()) absl::StrAppend(&message, context, ": ");
  absl::StrAppend(&message, call, " failed: ", name);
  if (!description.empty() && description != name) absl::StrAppend(&message, ": ", description);
  return absl::Status(code, message);
}

absl::StatusCode CodeFor(cudaError_t code) {
  switch (code) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CodeFor(CUresult code) {
  switch (code) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_STUB_LIBRARY:
      return absl::StatusCode::kFailedPrecondition;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND:  // e.g. cuModuleGetFunction with a name the module lacks.
      return absl::StatusCode::kNotFound;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CodeFor(cublasStatus_t code) {
  switch (code) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_NOT_INITIALIZED:  // What cublasLtCreate reports without a usable device.
      return absl::StatusCode::kFailedPrecondition;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CodeFor(nvrtcResult code) {
  switch (code) {
    case NVRTC_ERROR_OUT_OF_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    case NVRTC_ERROR_INVALID_INPUT:
    case NVRTC_ERROR_INVALID_PROGRAM:
    case NVRTC_ERROR_INVALID_OPTION:
    case NVRTC_ERROR_COMPILATION:  // The source is at fault, not the process.
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// cuDNN 9 groups codes by thousands (CUDNN_STATUS_CATEGORY) with specific sub-codes.
absl::StatusCode CodeFor(cudnnStatus_t code) {
  switch (code) {
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUDNN_STATUS_NOT_INITIALIZED:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
      return absl::StatusCode::kFailedPrecondition;
    default:
      break;
  }
  if (CUDNN_STATUS_CATEGORY(code) == CUDNN_STATUS_BAD_PARAM) {
    return absl::StatusCode::kInvalidArgument;
  }
  return absl::StatusCode::kInternal;
}

}  // namespace

absl::Status CudaStatus(cudaError_t code, absl::string_view call, absl::string_view context) {
  if (code == cudaSuccess) return absl::OkStatus();
  return MakeStatus(CodeFor(code), call, context, cudaGetErrorName(code), cudaGetErrorString(code));
}

absl::Status CudaStatus(CUresult code, absl::string_view call, absl::string_view context) {
  if (code == CUDA_SUCCESS) return absl::OkStatus();
  // The names come from the driver; without one (or for a code it does not know) use the number.
  const char* name = nullptr;
  const char* description = nullptr;
  if (absl::StatusOr<const DriverApi*> driver = Driver(); driver.ok()) {
    if ((*driver)->get_error_name(code, &name) != CUDA_SUCCESS) name = nullptr;
    if ((*driver)->get_error_string(code, &description) != CUDA_SUCCESS) description = nullptr;
  }
  const std::string fallback = absl::StrCat("CUresult ", static_cast<int>(code));
  return MakeStatus(CodeFor(code), call, context, name ? name : fallback,
                    description ? description : "");
}

absl::Status CudaStatus(cublasStatus_t code, absl::string_view call, absl::string_view context) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return MakeStatus(CodeFor(code), call, context, cublasLtGetStatusName(code),
                    cublasLtGetStatusString(code));
}

absl::Status CudaStatus(nvrtcResult code, absl::string_view call, absl::string_view context) {
  if (code == NVRTC_SUCCESS) return absl::OkStatus();
  return MakeStatus(CodeFor(code), call, context, nvrtcGetErrorString(code), "");
}

absl::Status CudaStatus(cudnnStatus_t code, absl::string_view call, absl::string_view context) {
  if (code == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  // cuDNN 9 keeps a per-thread explanation of its last failure; it says far more than the name.
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return MakeStatus(CodeFor(code), call, context, cudnnGetErrorString(code), detail);
}

}  // namespace reprise::runtime
