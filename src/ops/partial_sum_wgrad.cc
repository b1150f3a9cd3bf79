#include "src/ops/partial_sum_wgrad.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPartialSumWgrad(
    const LoweringContext& ctx, const std::string& node_name, const std::string& what,
    size_t partial_bytes, PartialSumLaunch partials, PartialSumLaunch sum) {
  if (ctx.workspace == nullptr || ctx.workspace_bytes < partial_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "node '", node_name, "': ", what, " needs ", partial_bytes,
        " bytes of workspace for its partial sums; its lane has ", ctx.workspace_bytes));
  }
  KernelArgs partial_args;
  partial_args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.workspace);
  KernelArgs sum_args;
  sum_args.Add(static_cast<const void*>(ctx.workspace)).Add(ctx.outputs[0]);
  std::vector<std::unique_ptr<GpuKernel>> kernels(2);
  ASSIGN_OR_RETURN(kernels[0], NvrtcKernel::Create(ctx, node_name, partials.source, partials.grid,
                                                   partials.block, partials.shared_bytes,
                                                   std::move(partial_args)));
  ASSIGN_OR_RETURN(kernels[1], NvrtcKernel::Create(ctx, node_name, sum.source, sum.grid, sum.block,
                                                   sum.shared_bytes, std::move(sum_args)));
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), partial_bytes));
}

}  // namespace reprise::ops
