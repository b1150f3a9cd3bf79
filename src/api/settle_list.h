// The kernels that may leave parameters or optimizer state outside their own buffers between
// steps (ops::GpuKernel::Settle; the double-buffered whole-step MLP kernel, codegen::MlpGuard), of
// every plan that shares one arena: a trainer, its shape buckets and its forward runners. Whoever
// reads or writes those buffers outside a step settles them first; before a plan steps, the
// kernels of the plan that stepped last are settled if it was another (each plan keeps its own
// second buffers and parity word, so a bucket must not step on weights another left elsewhere).
#ifndef REPRISE_SRC_API_SETTLE_LIST_H_
#define REPRISE_SRC_API_SETTLE_LIST_H_

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "src/ops/gpu_kernel.h"

namespace reprise {

class SettleList {
 public:
  // `kernel` (NeedsSettle) belongs to `owner`'s plan and outlives its entry (Remove).
  void Add(const void* owner, const ops::GpuKernel* kernel);
  void Remove(const void* owner);
  // Enqueues every kernel's settle on `stream`: after it, every parameter and optimizer state is
  // in its own buffer.
  absl::Status Settle(cudaStream_t stream) const;
  // Enqueues only what brings the non-finite guard's counters up to date (GpuKernel::
  // SettleCounters), leaving the parameters where they are.
  absl::Status SettleCounters(cudaStream_t stream) const;
  // Before `owner`'s step on `stream`: settles where another plan of the arena stepped last.
  absl::Status BeforeStep(const void* owner, cudaStream_t stream);

 private:
  std::vector<std::pair<const void*, const ops::GpuKernel*>> kernels_;
  const void* last_step_ = nullptr;
};

}  // namespace reprise

#endif  // REPRISE_SRC_API_SETTLE_LIST_H_
