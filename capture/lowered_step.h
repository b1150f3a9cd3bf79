// Lowering a Plan to launches with resolved device addresses: launch 0 copies the step's inputs
// from pinned host staging into the arena; then one GpuKernel per scheduled node.
#ifndef REPRISE_CAPTURE_LOWERED_STEP_H_
#define REPRISE_CAPTURE_LOWERED_STEP_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"
#include "src/passes/plan.h"
#include "src/runtime/gather_list.h"

namespace reprise::capture {

struct StepResources {
  const runtime::DeviceInfo* device = nullptr;
  runtime::KernelStore* kernels = nullptr;
  const runtime::LtHandle* lt = nullptr;
  const runtime::CudnnHandle* cudnn = nullptr;
  char* arena = nullptr;      // Device base of the plan's arena.
  void* workspace = nullptr;  // cuBLASLt and cuDNN workspace (lane 0).
  size_t workspace_bytes = 0;
  const void* input_staging = nullptr;  // Pinned host mirror of the arena's input region.
  ops::LoweringOptions lowering;
  // Workspaces of lanes 1, 2, ... (workspace_bytes each): concurrent GEMMs never share one.
  // Communication ops (data parallelism) need none, so their lane may have none.
  std::vector<void*> lane_workspaces;
  // Each compute lane's tickets (runtime::LaneWorkspaces::tickets), lane 0 first, `ticket_words`
  // each; lanes past the list's end have none.
  std::vector<unsigned*> lane_tickets;
  int64_t ticket_words = 0;
  parallel::Communicator* communicator = nullptr;  // For communication ops.
};

// Launch 0 of every lowered step: copies of the input region from the pinned staging (batches
// and scalars change by rewriting the staging), one per stretch of inputs that are not bound, then
// one per input bound to memory the caller owns (device or pinned host) into its slot. A step
// whose inputs are all bound stages nothing from the host.
//
// The copies are one gather kernel (Gathers) where the device can read every source and they are
// few and small; else memcpy nodes, one per copy. Each node of a graph costs a few microseconds
// of a small step (on an H200: 8 to 13 us for the issue-9 step's three copies,
// docs/results/history/2026-11-28_357315a.md).
class InputCopy : public ops::GpuKernel {
 public:
  // Staged stretches of at most this many bytes in all are read by the gather kernel through the
  // staging's mapped address; larger ones go by DMA (memcpy nodes).
  static constexpr size_t kGatherMaxStagedBytes = 64 << 10;

  // `host_on_device`: the staging's device address (pinned memory is mapped under unified
  // addressing), or nullptr, which leaves only memcpy nodes.
  InputCopy(void* device, const void* host, size_t bytes, const void* host_on_device = nullptr)
      : device_(device), host_(host), host_on_device_(host_on_device), bytes_(bytes) {
    UpdateStaged();
  }
  absl::Status Launch(cudaStream_t stream) const override;
  std::string Describe() const override;
  // Copies `bytes` from `source` into `slot` instead of staging them from the host; nullptr
  // removes the binding. `on_device`: the source is device memory of this GPU.
  void Bind(void* slot, const void* source, size_t bytes, bool on_device = false);
  bool IsBound(const void* slot) const;
  // One gather kernel rather than memcpy nodes: every bound source is device memory, at most
  // kGatherMaxStagedBytes are staged through a mapped staging, and the copies fit a GatherList.
  bool Gathers() const { return gathers_; }
  const runtime::GatherList& gather_list() const { return gather_; }  // With Gathers.

 private:
  // Recomputes staged_ and the gather list from the bindings (in Bind, not in every Launch).
  void UpdateStaged();

  struct Bound {
    void* slot;
    const void* source;
    size_t bytes;
    bool on_device;
  };
  void* device_;
  const void* host_;
  const void* host_on_device_;
  size_t bytes_;
  std::vector<Bound> bound_;  // In binding order, so re-captures keep the same node order.
  // [begin, end) byte offsets of the input region that no binding covers, in order: one host
  // copy each (none when every input is bound).
  std::vector<std::pair<size_t, size_t>> staged_;
  bool gathers_ = false;
  runtime::GatherList gather_;  // With gathers_: the staged stretches, then the bound inputs.
};

struct LoweredLaunch {
  std::string node_name;
  int lane = 0;
  std::vector<int> waits;  // Indices of launches (in the lowered list) on other lanes.
  std::unique_ptr<ops::GpuKernel> kernel;
};

struct LoweredStep {
  std::vector<LoweredLaunch> launches;
  InputCopy* input_copy = nullptr;  // Launch 0's kernel: where bindings go (CapturedStep::Bind).
};

// Compiles every kernel and picks every cuBLASLt algorithm now, so running needs neither. Launch 0
// is always the InputCopy.
absl::StatusOr<LoweredStep> LowerPlan(const passes::Plan& plan, const StepResources& resources);

// Programmatic dependent launch (ops::LoweringOptions::dependent_launch): lets each launch's first
// kernel start early where the launch before it on its lane LetsDependentsStartEarly (it ended
// with one of our kernels or a cuDNN convolution) and nothing from another lane joins in between,
// or, with `after_libraries`, after anything but the step's start. LowerPlan calls it.
void AllowDependentStarts(std::vector<LoweredLaunch>& launches, bool after_libraries);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_LOWERED_STEP_H_
