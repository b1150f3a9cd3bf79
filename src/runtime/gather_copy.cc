#include "src/runtime/gather_copy.h"

#include "src/runtime/cuda_status.h"

namespace reprise::runtime {

absl::Status LaunchGather(const GatherList& list, cudaStream_t stream, const std::string& context) {
  if (list.count == 0) return absl::OkStatus();
  return CudaStatus(LaunchGatherKernel(list, stream), "gather copy kernel launch", context);
}

}  // namespace reprise::runtime
