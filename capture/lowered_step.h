// Lowering a Plan to launches with resolved device addresses: launch 0 copies the step's inputs
// from pinned host staging into the arena; then one GpuKernel per scheduled node.
#ifndef REPRISE_CAPTURE_LOWERED_STEP_H_
#define REPRISE_CAPTURE_LOWERED_STEP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"
#include "src/passes/plan.h"

namespace reprise::capture {

struct StepResources {
  const runtime::DeviceInfo* device = nullptr;
  runtime::KernelStore* kernels = nullptr;
  const runtime::LtHandle* lt = nullptr;
  char* arena = nullptr;      // Device base of the plan's arena.
  void* workspace = nullptr;  // cuBLASLt workspace (lane 0).
  size_t workspace_bytes = 0;
  const void* input_staging = nullptr;  // Pinned host mirror of the arena's input region.
  bool allow_tf32 = false;
  // Workspaces of lanes 1, 2, ... (workspace_bytes each): concurrent GEMMs never share one.
  std::vector<void*> lane_workspaces;
};

struct LoweredLaunch {
  std::string node_name;
  int lane = 0;
  std::vector<int> waits;  // Indices of launches (in the lowered list) on other lanes.
  std::unique_ptr<ops::GpuKernel> kernel;
};

// Compiles every kernel and picks every cuBLASLt algorithm now, so running needs neither.
absl::StatusOr<std::vector<LoweredLaunch>> LowerPlan(const passes::Plan& plan,
                                                     const StepResources& resources);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_LOWERED_STEP_H_
