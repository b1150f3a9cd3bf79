// One kernel that copies a few byte ranges at once: the step's input copy (capture::InputCopy)
// uses it instead of one memcpy node per range where every source is readable by the device
// (device memory, or pinned host memory through its mapped address).
#ifndef REPRISE_SRC_RUNTIME_GATHER_COPY_H_
#define REPRISE_SRC_RUNTIME_GATHER_COPY_H_

#include <string>

#include "absl/status/status.h"
#include "src/runtime/gather_list.h"

namespace reprise::runtime {

// Enqueues the copy of every range of `list` on `stream` (nothing when it is empty). `context`
// names the node in the error.
absl::Status LaunchGather(const GatherList& list, cudaStream_t stream, const std::string& context);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_GATHER_COPY_H_
