// CudnnTensorDescriptor: the move-only owner of one cuDNN tensor descriptor, for the legacy
// (descriptor-based) cuDNN calls such as batch normalization. Lowerings build descriptors once;
// launches only read them, so nothing here runs while a CUDA graph is being captured.
//
//   ASSIGN_OR_RETURN(CudnnTensorDescriptor x, CudnnTensorDescriptor::Create4d(
//       CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, {n, c, h, w}, "node 'bn1'"));
#ifndef REPRISE_SRC_RUNTIME_CUDNN_TENSOR_H_
#define REPRISE_SRC_RUNTIME_CUDNN_TENSOR_H_

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

class CudnnTensorDescriptor {
 public:
  // A fully packed 4-D tensor of logical extents {n, c, h, w}, stored in `format` order (NCHW or
  // NHWC). InvalidArgument, naming `context`, when an extent is not in [1, INT_MAX] (cuDNN's
  // legacy descriptors hold ints); cuDNN's own errors as CudaStatus maps them.
  static absl::StatusOr<CudnnTensorDescriptor> Create4d(cudnnTensorFormat_t format,
                                                        cudnnDataType_t dtype,
                                                        const std::array<int64_t, 4>& nchw,
                                                        absl::string_view context);
  cudnnTensorDescriptor_t get() const { return descriptor_.get(); }

 private:
  struct Deleter {
    void operator()(cudnnTensorDescriptor_t descriptor) const;
  };
  explicit CudnnTensorDescriptor(cudnnTensorDescriptor_t descriptor) : descriptor_(descriptor) {}
  std::unique_ptr<cudnnTensorStruct, Deleter> descriptor_;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_TENSOR_H_
