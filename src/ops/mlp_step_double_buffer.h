// The launch of a double-buffered whole-step MLP kernel (codegen::MlpGuard,
// MlpStepPlan::double_buffered): the step itself, and its Settle, which brings the parameters and
// velocities back to their own buffers where the parity word says the shadow holds them (two
// launches of codegen::MlpStepSettleKernel: the copy, then the word cleared). Between steps only
// Settle makes those buffers current; every reader outside the step must call it first. With a
// deferred verdict the guard's counters lag one step behind too: Settle, or SettleCounters alone,
// brings them up to date.
#ifndef REPRISE_SRC_OPS_MLP_STEP_DOUBLE_BUFFER_H_
#define REPRISE_SRC_OPS_MLP_STEP_DOUBLE_BUFFER_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// The device addresses the settle reads and writes, as the step kernel takes them.
struct MlpStepBuffers {
  void* barrier = nullptr;
  // Per layer: W_l, b_l, W_l's velocity and b_l's, the step kernel's parameters in its order.
  std::vector<std::array<void*, 4>> layers;
  void* shadow = nullptr;         // The step's shadow input (MlpStepTarget::shadow).
  void* skipped_steps = nullptr;  // The guard's counters, which a deferred verdict folds into.
  void* record = nullptr;
};

class DoubleBufferedMlpStep : public GpuKernel {
 public:
  // `step` launches `plan`'s kernel (plan.double_buffered); errors name `node_name`.
  static absl::StatusOr<std::unique_ptr<GpuKernel>> Create(const LoweringContext& ctx,
                                                           const std::string& node_name,
                                                           const codegen::MlpStepPlan& plan,
                                                           const MlpStepBuffers& buffers,
                                                           std::unique_ptr<GpuKernel> step);

  absl::Status Launch(cudaStream_t stream) const override { return step_->Launch(stream); }
  std::string Describe() const override;
  std::vector<std::string> GeneratedKernelNames() const override {
    return step_->GeneratedKernelNames();
  }
  size_t WorkspaceBytes() const override { return step_->WorkspaceBytes(); }
  absl::Status Settle(cudaStream_t stream) const override;
  absl::Status SettleCounters(cudaStream_t stream) const override;
  bool NeedsSettle() const override { return true; }

 private:
  DoubleBufferedMlpStep() = default;
  // clear_ folds the verdict too, and fold_ only folds it (MlpStepPlan::deferred_verdict; else
  // null: the counters are always current).
  std::unique_ptr<GpuKernel> step_, copy_, clear_, fold_;
};

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MLP_STEP_DOUBLE_BUFFER_H_
