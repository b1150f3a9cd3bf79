// The kernels a Trainer acquires before it lowers its plan, and the process-wide kernel store they
// live in (src/runtime/kernel_store.h).
#ifndef REPRISE_SRC_API_TRAINER_KERNELS_H_
#define REPRISE_SRC_API_TRAINER_KERNELS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_store.h"

namespace reprise {

// Whether the graph holds 4-D (image) tensors: a convolutional network.
bool HasImages(const Graph& graph);

// Every fixed generated kernel, whether or not this plan uses it, and the plan's fused chains:
// they compile (or load from the disk cache) in parallel, so lowering finds them all in memory.
absl::StatusOr<std::vector<runtime::KernelSource>> KernelsToPrefetch(const Graph& graph);

// One kernel store per device and cache folder for the whole process, so a second Trainer finds
// every kernel already loaded. Never destroyed: its modules live as long as the CUDA context.
std::shared_ptr<runtime::KernelStore> SharedKernelStore(const runtime::DeviceInfo& device);

}  // namespace reprise

#endif  // REPRISE_SRC_API_TRAINER_KERNELS_H_
