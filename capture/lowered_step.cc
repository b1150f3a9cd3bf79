#include "capture/lowered_step.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/gather_copy.h"
#include "src/util/status_macros.h"

namespace reprise::capture {
void InputCopy::UpdateStaged() {
  std::vector<std::pair<size_t, size_t>> bound;  // [begin, end) offsets in the input region.
  for (const Bound& b : bound_) {
    const size_t begin = static_cast<const char*>(b.slot) - static_cast<const char*>(device_);
    bound.emplace_back(begin, begin + b.bytes);
  }
  std::sort(bound.begin(), bound.end());
  staged_.clear();
  size_t next = 0;
  for (const auto& [begin, end] : bound) {
    if (begin > next) staged_.emplace_back(next, begin);
    next = std::max(next, end);
  }
  if (next < bytes_) staged_.emplace_back(next, bytes_);

  size_t staged_bytes = 0;
  for (const auto& [begin, end] : staged_) staged_bytes += end - begin;
  const bool all_on_device =
      std::all_of(bound_.begin(), bound_.end(), [](const Bound& b) { return b.on_device; });
  gathers_ =
      all_on_device && staged_.size() + bound_.size() <= runtime::GatherList::kMaxRanges &&
      (staged_.empty() || (host_on_device_ != nullptr && staged_bytes <= kGatherMaxStagedBytes));
  gather_ = {};
  if (!gathers_) return;
  for (const auto& [begin, end] : staged_) {
    gather_.ranges[gather_.count++] = {static_cast<char*>(device_) + begin,
                                       static_cast<const char*>(host_on_device_) + begin,
                                       end - begin};
  }
  for (const Bound& b : bound_) gather_.ranges[gather_.count++] = {b.slot, b.source, b.bytes};
}

absl::Status InputCopy::Launch(cudaStream_t stream) const {
  if (gathers_) return runtime::LaunchGather(gather_, stream, "node 'copy_inputs'");
  // Bound inputs are not staged: their bytes would cross PCIe only to be overwritten.
  for (const auto& [begin, end] : staged_) {
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaMemcpyAsync(static_cast<char*>(device_) + begin,
                                            static_cast<const char*>(host_) + begin, end - begin,
                                            cudaMemcpyHostToDevice, stream),
                            "cudaMemcpyAsync", "node 'copy_inputs'"));
  }
  for (const Bound& b : bound_) {
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaMemcpyAsync(b.slot, b.source, b.bytes, cudaMemcpyDefault, stream),
                            "cudaMemcpyAsync", "node 'copy_inputs' (bound input)"));
  }
  return absl::OkStatus();
}

std::string InputCopy::Describe() const {
  size_t staged = 0;
  for (const auto& [begin, end] : staged_) staged += end - begin;
  std::string text =
      absl::StrCat(gathers_ ? "gather kernel, H2D " : "memcpy H2D ", staged, " bytes");
  if (!bound_.empty()) absl::StrAppend(&text, " + ", bound_.size(), " bound input copies");
  return text;
}

void InputCopy::Bind(void* slot, const void* source, size_t bytes, bool on_device) {
  auto it =
      std::find_if(bound_.begin(), bound_.end(), [&](const Bound& b) { return b.slot == slot; });
  if (source == nullptr) {
    if (it != bound_.end()) bound_.erase(it);
  } else if (it != bound_.end()) {
    it->source = source;
    it->on_device = on_device;
  } else {
    bound_.push_back({slot, source, bytes, on_device});
  }
  UpdateStaged();
}

bool InputCopy::IsBound(const void* slot) const {
  return std::any_of(bound_.begin(), bound_.end(), [&](const Bound& b) { return b.slot == slot; });
}

namespace {

// Lowerings read float32 unless their op says it handles 16-bit floats: refuse the others by name
// rather than run them on the wrong bytes.
absl::Status CheckLowPrecisionLowering(const Node& node, absl::Span<const TensorSpec> inputs) {
  if (node.op->low_precision) return absl::OkStatus();
  auto check = [&](const TensorSpec& spec) -> absl::Status {
    if (!IsLowPrecision(spec.dtype)) return absl::OkStatus();
    if (node.op->low_precision_lowering) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat("op '", node.op_name(), "' node '", node.name,
                                                 "' has no GPU lowering for ", spec.ToString(),
                                                 " yet"));
  };
  for (const TensorSpec& spec : inputs) RETURN_IF_ERROR(check(spec));
  for (const TensorSpec& spec : node.outputs) RETURN_IF_ERROR(check(spec));
  return absl::OkStatus();
}

// The device address of pinned host memory (the staging), or nullptr where it has none: then the
// input copy keeps to memcpy nodes.
const void* MappedAddress(const void* host) {
  if (host == nullptr) return nullptr;
  cudaPointerAttributes attributes = {};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return attributes.type == cudaMemoryTypeHost ? attributes.devicePointer : nullptr;
}

}  // namespace

// After any library kernel (cuBLASLt's products above all), our kernels launched early made
// GPT-2's and MLP 4x1024's steps 0.8 to 1.5% slower on an H200 (docs/benchmarks.md).
void AllowDependentStarts(std::vector<LoweredLaunch>& launches, bool after_libraries) {
  std::vector<int> last_on_lane;
  for (size_t i = 0; i < launches.size(); ++i) {
    LoweredLaunch& launch = launches[i];
    if (launch.lane >= static_cast<int>(last_on_lane.size()))
      last_on_lane.resize(launch.lane + 1, -1);
    const int before = last_on_lane[launch.lane];
    const bool after_own =
        before >= 0 && launch.waits.empty() && launches[before].kernel->LetsDependentsStartEarly();
    launch.kernel->SetDependentStart(after_own || (after_libraries && i > 0));
    last_on_lane[launch.lane] = static_cast<int>(i);
  }
}

absl::StatusOr<LoweredStep> LowerPlan(const passes::Plan& plan, const StepResources& res) {
  const Graph& g = plan.graph();
  LoweredStep step;
  std::vector<LoweredLaunch>& launches = step.launches;
  auto input_copy =
      std::make_unique<InputCopy>(res.arena + plan.memory.input_offset, res.input_staging,
                                  plan.memory.input_bytes, MappedAddress(res.input_staging));
  step.input_copy = input_copy.get();
  launches.push_back({"copy_inputs", 0, {}, std::move(input_copy)});
  const int compute_lanes = plan.compute_lanes();
  for (const passes::ScheduledLaunch& scheduled : plan.launches) {
    const Node& node = g.node(scheduled.node);
    ops::LoweringContext ctx;
    ctx.kernels = res.kernels;
    ctx.lt = res.lt;
    ctx.cudnn = res.cudnn;
    ctx.device = res.device;
    ctx.workspace = res.workspace;
    ctx.workspace_bytes = res.workspace_bytes;
    if (scheduled.lane >= compute_lanes) {
      // The communication lane has no workspace: its collectives, optimizer updates and the casts
      // that widen averaged gradients need none.
      ctx.workspace = nullptr;
      ctx.workspace_bytes = 0;
    } else if (scheduled.lane > static_cast<int>(res.lane_workspaces.size())) {
      return absl::InternalError(
          absl::StrCat("no workspace for lane ", scheduled.lane, " of '", node.name, "'"));
    } else if (scheduled.lane > 0) {
      ctx.workspace = res.lane_workspaces[scheduled.lane - 1];
    }
    if (scheduled.lane < compute_lanes &&
        scheduled.lane < static_cast<int>(res.lane_tickets.size())) {
      ctx.tickets = res.lane_tickets[scheduled.lane];
      ctx.ticket_words = res.ticket_words;
    }
    ctx.options = res.lowering;
    ctx.communicator = res.communicator;
    for (const Value& v : node.inputs) {
      const passes::Buffer* b = plan.memory.Find(v);
      if (b == nullptr)
        return absl::InternalError(absl::StrCat("no buffer for an input of '", node.name, "'"));
      ctx.input_specs.push_back(g.spec(v));
      ctx.inputs.push_back(res.arena + b->offset);
    }
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      const passes::Buffer* b = plan.memory.Find({node.id, o});
      if (b == nullptr)
        return absl::InternalError(absl::StrCat("no buffer for an output of '", node.name, "'"));
      ctx.outputs.push_back(res.arena + b->offset);
    }
    if (node.op->lower == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("op '", node.op_name(), "' node '", node.name, "' has no GPU lowering"));
    }
    RETURN_IF_ERROR(CheckLowPrecisionLowering(node, ctx.input_specs));
    ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> kernel, node.op->lower(ctx, node));
    std::vector<int> waits;  // The input copy is launch 0 of the lowered list.
    for (int w : scheduled.waits) waits.push_back(w + 1);
    launches.push_back({node.name, scheduled.lane, std::move(waits), std::move(kernel)});
  }
  AllowDependentStarts(launches, res.lowering.dependent_launch_after_libraries);
  return step;
}

}  // namespace reprise::capture
