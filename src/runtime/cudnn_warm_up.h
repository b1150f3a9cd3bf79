// The first run of a cuDNN graph-API plan, made ahead of the step's capture (attention and
// convolutions share it; no cudnn-frontend types here).
#ifndef REPRISE_SRC_RUNTIME_CUDNN_WARM_UP_H_
#define REPRISE_SRC_RUNTIME_CUDNN_WARM_UP_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

// Runs `first_run(placeholder)` on `handle` into a throw-away capture on a stream of its own,
// with one device allocation of `placeholder_bytes` standing in for every operand and the
// workspace, so that whatever cuDNN does on a plan's first run (loading its kernels) happens now
// and not inside the Trainer's capture of the step, whose thread-local capture mode refuses module
// loads. Nothing reaches the device: the capture is discarded. Best effort: a warm-up that fails
// leaves the first run to the step itself, which reports its own errors; only failing to give the
// handle its stream back is an error, named with `context`. With `placeholder_bytes` 0 nothing is
// allocated and `first_run` gets nullptr: for a caller that hands the plan real buffers (a
// ResNet-50 at batch 256 allocated and freed 400 MB for each of its plans).

absl::Status WarmUpInThrowawayCapture(const CudnnHandle& handle, size_t placeholder_bytes,
                                      absl::FunctionRef<void(void* placeholder)> first_run,
                                      absl::string_view context);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_WARM_UP_H_
