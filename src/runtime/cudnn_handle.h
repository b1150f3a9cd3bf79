// CudnnHandle: the owner of one cuDNN handle. A plan's cuDNN launches share it: each launch binds
// it to its lane's stream first (cudnnSetStream is host state, and launches are recorded one at a
// time), so one handle serves every lane.
//
//   ASSIGN_OR_RETURN(CudnnHandle cudnn, CudnnHandle::Create());
//   RETURN_IF_ERROR(cudnn.Bind(stream, "node 'conv1'"));
#ifndef REPRISE_SRC_RUNTIME_CUDNN_HANDLE_H_
#define REPRISE_SRC_RUNTIME_CUDNN_HANDLE_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

class CudnnHandle {
 public:
  // FailedPrecondition (from cuDNN's code) when no device or no cuDNN library is usable.
  static absl::StatusOr<CudnnHandle> Create();
  cudnnHandle_t get() const { return handle_.get(); }
  // Makes the handle's next calls run on `stream`; `context` names the caller in errors.
  absl::Status Bind(cudaStream_t stream, absl::string_view context) const;

 private:
  struct Deleter {
    void operator()(cudnnHandle_t handle) const;
  };
  explicit CudnnHandle(cudnnHandle_t handle) : handle_(handle) {}
  std::unique_ptr<cudnnContext, Deleter> handle_;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_HANDLE_H_
