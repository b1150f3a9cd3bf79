// A weight gradient in two kernels: one writes each block's partial sums into the lane's
// workspace, the next adds them up into the gradient (no atomics, so the bits are the same every
// run). Our own 3x3 and narrow (stem) weight gradients lower this way.
#ifndef REPRISE_SRC_OPS_PARTIAL_SUM_WGRAD_H_
#define REPRISE_SRC_OPS_PARTIAL_SUM_WGRAD_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

struct PartialSumLaunch {
  codegen::GeneratedKernel source;
  dim3 grid, block;
  unsigned shared_bytes = 0;
};

// Inputs (input activation, output gradient) and output (weight gradient) are ctx's first ones.
// `what` names the gradient in the error when the lane's workspace is smaller than
// `partial_bytes`.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPartialSumWgrad(
    const LoweringContext& ctx, const std::string& node_name, const std::string& what,
    size_t partial_bytes, PartialSumLaunch partials, PartialSumLaunch sum);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_PARTIAL_SUM_WGRAD_H_
