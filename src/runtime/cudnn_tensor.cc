#include "src/runtime/cudnn_tensor.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

absl::StatusOr<CudnnTensorDescriptor> CudnnTensorDescriptor::Create4d(
    cudnnTensorFormat_t format, cudnnDataType_t dtype, const std::array<int64_t, 4>& nchw,
    absl::string_view context) {
  for (int64_t extent : nchw) {
    if (extent < 1 || extent > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": cuDNN tensor extents [", absl::StrJoin(nchw, ", "),
                       "] (N, C, H, W) must each lie in [1, ", INT_MAX, "]"));
    }
  }
  cudnnTensorDescriptor_t raw = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudnnCreateTensorDescriptor(&raw), "cudnnCreateTensorDescriptor", context));
  CudnnTensorDescriptor descriptor(raw);  // Owns it from here, whatever happens next.
  RETURN_IF_ERROR(
      CudaStatus(cudnnSetTensor4dDescriptor(raw, format, dtype, static_cast<int>(nchw[0]),
                                            static_cast<int>(nchw[1]), static_cast<int>(nchw[2]),
                                            static_cast<int>(nchw[3])),
                 "cudnnSetTensor4dDescriptor", context));
  return descriptor;
}

void CudnnTensorDescriptor::Deleter::operator()(cudnnTensorDescriptor_t descriptor) const {
  cudnnDestroyTensorDescriptor(descriptor);
}

}  // namespace reprise::runtime
