// Timing lowered kernels against each other on their node's own buffers, for lowerings that can
// choose between libraries for one node (a cuDNN plan or a cuBLASLt epilogue) by measuring.
#ifndef REPRISE_SRC_OPS_KERNEL_TIMING_H_
#define REPRISE_SRC_OPS_KERNEL_TIMING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

struct KernelTimingOptions {
  int launches_per_round = 10;  // Back to back between one pair of events.
  int rounds = 5;               // The kernels take turns, round by round.
};

// Each kernel's median milliseconds per launch over the rounds, after one untimed launch each,
// in the order given. The kernels run on cudaStreamPerThread, which this waits for; they write
// their outputs, so call it at lowering, before the buffers hold anything. Errors name `what`.
absl::StatusOr<std::vector<double>> TimeKernelsInTurns(absl::Span<const GpuKernel* const> kernels,
                                                       const KernelTimingOptions& options,
                                                       absl::string_view what);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_KERNEL_TIMING_H_
