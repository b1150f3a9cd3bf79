#include "src/ops/mlp_step_double_buffer.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<std::unique_ptr<GpuKernel>> DoubleBufferedMlpStep::Create(
    const LoweringContext& ctx, const std::string& node_name, const codegen::MlpStepPlan& plan,
    const MlpStepBuffers& buffers, std::unique_ptr<GpuKernel> step) {
  if (!plan.double_buffered || buffers.layers.size() != static_cast<size_t>(plan.layers())) {
    return absl::InternalError(absl::StrCat(
        "node '", node_name, "': a double-buffered step needs a double-buffered plan and the ",
        "parameters and velocities of its ", plan.layers(), " layers"));
  }
  const codegen::GeneratedKernel settle = codegen::MlpStepSettleKernel(plan);
  auto args = [&](int mode) {
    KernelArgs a;
    a.Add(buffers.barrier);
    for (const std::array<void*, 4>& layer : buffers.layers) {
      for (void* tensor : layer) a.Add(tensor);
    }
    a.Add(buffers.shadow);
    a.Add(buffers.skipped_steps);
    a.Add(buffers.record);
    a.Add(mode);
    return a;
  };
  // The copy's grid: a thread per float of the largest layer, at most four blocks per SM.
  int64_t largest = 0;
  for (int l = 0; l < plan.layers(); ++l) {
    largest =
        std::max<int64_t>(largest, int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l]);
  }
  constexpr int kThreads = 256;
  const int most = 4 * std::max(1, ctx.device->sm_count);
  const int grid =
      static_cast<int>(std::clamp<int64_t>((largest + kThreads - 1) / kThreads, 1, most));
  std::unique_ptr<DoubleBufferedMlpStep> kernel(new DoubleBufferedMlpStep());
  kernel->step_ = std::move(step);
  ASSIGN_OR_RETURN(kernel->copy_,
                   NvrtcKernel::Create(ctx, absl::StrCat(node_name, ".settle"), settle, dim3(grid),
                                       dim3(kThreads), 0, args(0)));
  ASSIGN_OR_RETURN(kernel->clear_, NvrtcKernel::Create(ctx, absl::StrCat(node_name, ".settle"),
                                                       settle, dim3(1), dim3(1), 0, args(1)));
  if (plan.deferred_verdict) {
    if (buffers.skipped_steps == nullptr || buffers.record == nullptr) {
      return absl::InternalError(absl::StrCat(
          "node '", node_name, "': a deferred verdict needs the guard's counters to fold into"));
    }
    ASSIGN_OR_RETURN(kernel->fold_, NvrtcKernel::Create(ctx, absl::StrCat(node_name, ".settle"),
                                                        settle, dim3(1), dim3(1), 0, args(2)));
  }
  return std::unique_ptr<GpuKernel>(std::move(kernel));
}

std::string DoubleBufferedMlpStep::Describe() const {
  return absl::StrCat(step_->Describe(), " (parameters double-buffered)");
}

absl::Status DoubleBufferedMlpStep::Settle(cudaStream_t stream) const {
  RETURN_IF_ERROR(copy_->Launch(stream));
  return clear_->Launch(stream);
}

absl::Status DoubleBufferedMlpStep::SettleCounters(cudaStream_t stream) const {
  return fold_ == nullptr ? absl::OkStatus() : fold_->Launch(stream);
}

}  // namespace reprise::ops
