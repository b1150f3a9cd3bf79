// ForwardRunner (reprise/forward_runner.h): a forward-only plan on a trainer's device. The plan
// comes from the trainer's own passes (mixed precision, fuse, schedule, memory plan) with no
// autodiff or optimizer; capture/ lowers and captures it as it does a training step.
//
// Parameters in place: the memory plan puts every parameter first, at offsets [0, P) of the
// arena, then everything else. The runner allocates only [P, arena_bytes) and resolves offsets
// against base = allocation - P, so its own tensors land in its allocation; each parameter's
// offset is then set to (the trainer's parameter address - base), so that the lowering, which
// resolves every tensor as base + offset, reads the trainer's buffer itself.
#include "reprise/forward_runner.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "capture/executor.h"
#include "capture/lowered_step.h"
#include "src/api/compile_options.h"
#include "src/api/forward_plan.h"
#include "src/api/input_checks.h"
#include "src/api/trainer_impl.h"
#include "src/ir/host_tensor.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/ops/mlp_step.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {

class ForwardRunner::Impl {
 public:
  static absl::StatusOr<std::unique_ptr<Impl>> Create(const Trainer::Impl& trainer,
                                                      const Graph& graph,
                                                      absl::Span<const Value> outputs,
                                                      const ForwardOptions& options);
  absl::Status SetInput(absl::string_view name, const void* data, size_t count, DType dtype);
  absl::Status Run();
  absl::Status Synchronize();
  absl::Status ReadRaw(Value output, DType dtype, void* host, size_t count);
  absl::StatusOr<int64_t> OutputElements(Value output) const;
  absl::Status ResetState();
  ForwardStats stats() const;

 private:
  Impl() = default;
  // Points each parameter buffer at the trainer's (see the top of this file).
  absl::Status PlaceParameters(const Trainer::Impl& trainer);
  absl::Status Allocate();
  absl::Status InitLeaves(bool state_only);
  absl::StatusOr<const passes::Buffer*> OutputBuffer(Value output) const;

  ForwardOptions options_;
  uint64_t seed_ = 0;
  passes::Plan plan_;
  absl::flat_hash_map<Value, Value> outputs_;  // The user's output -> its value in the plan.
  uint32_t graph_id_ = 0;  // The compiled graph's Graph::id(): other graphs' values are refused.
  Trainer::Impl::DeviceShare share_;  // The trainer's stream, handles and arena.
  std::shared_ptr<runtime::KernelStore> kernels_;
  runtime::DeviceInfo device_;
  ops::LoweringOptions lowering_;
  std::optional<runtime::DeviceBuffer> arena_;  // [P, arena_bytes) of the plan.
  char* base_ = nullptr;                        // Where offset 0 would be.
  int64_t parameter_region_ = 0;                // P
  std::optional<runtime::PinnedBuffer> staging_;
  std::vector<capture::LoweredLaunch> launches_;
  std::optional<capture::Lanes> lanes_;
  std::optional<capture::CapturedStep> captured_;
  absl::flat_hash_map<std::string, ForwardPlan::Limit> limits_;  // Token ids and labels.
  int64_t runs_ = 0;
  int64_t shared_parameter_bytes_ = 0;
};

absl::StatusOr<std::unique_ptr<ForwardRunner::Impl>> ForwardRunner::Impl::Create(
    const Trainer::Impl& trainer, const Graph& graph, absl::Span<const Value> outputs,
    const ForwardOptions& options) {
  const TrainOptions& train = trainer.options();
  ASSIGN_OR_RETURN(ForwardPlan planned,
                   BuildForwardPlan(graph, outputs, train,
                                    ops::MlpTrainStepTargetFor(trainer.device()), options.fuse));
  RETURN_IF_ERROR(CheckForwardParameters(
      planned.plan, [&](const std::string& name) -> absl::StatusOr<TensorSpec> {
        ASSIGN_OR_RETURN(const Trainer::Impl::NamedTensor t,
                         trainer.Resolve(name, ir::ParameterOp(), "parameter"));
        return t.spec;
      }));
  auto impl = std::unique_ptr<Impl>(new Impl());
  impl->options_ = options;
  impl->seed_ = train.seed;
  impl->plan_ = std::move(planned.plan);
  impl->outputs_ = std::move(planned.outputs);
  impl->graph_id_ = graph.id();
  impl->limits_ = std::move(planned.limits);
  impl->parameter_region_ = planned.parameter_region;
  impl->share_ = trainer.SharedDevice();
  impl->kernels_ = trainer.kernel_store();
  impl->device_ = trainer.device();
  impl->lowering_ = LoweringOptionsFor(train);
  RETURN_IF_ERROR(impl->Allocate());
  RETURN_IF_ERROR(impl->PlaceParameters(trainer));
  RETURN_IF_ERROR(impl->InitLeaves(/*state_only=*/false));

  capture::StepResources res;
  res.device = &impl->device_;
  res.kernels = impl->kernels_.get();
  res.lt = &*impl->share_.lt;
  res.cudnn = &*impl->share_.cudnn;
  res.arena = impl->base_;
  res.workspace = impl->share_.workspaces->lane(0);
  res.workspace_bytes = impl->share_.workspaces->reserve_bytes();
  res.lane_tickets.push_back(impl->share_.workspaces->tickets(0));
  res.ticket_words = runtime::LaneWorkspaces::kTicketWords;
  res.input_staging = impl->staging_->data();
  res.lowering = impl->lowering_;
  ASSIGN_OR_RETURN(capture::LoweredStep lowered, capture::LowerPlan(impl->plan_, res));
  impl->launches_ = std::move(lowered.launches);
  size_t workspace = 0;
  for (const capture::LoweredLaunch& launch : impl->launches_) {
    workspace = std::max(workspace, launch.kernel->WorkspaceBytes());
  }
  // Raises lane 0's high-water mark if this plan needs more than the trainer's.
  RETURN_IF_ERROR(impl->share_.workspaces->Settle(std::vector<size_t>{workspace}));
  ASSIGN_OR_RETURN(impl->lanes_, capture::Lanes::Create(impl->launches_));
  if (options.mode == ExecMode::kGraph) {
    ASSIGN_OR_RETURN(
        capture::CapturedStep step,
        capture::CapturedStep::Capture(impl->launches_, *impl->lanes_, impl->share_.stream->get()));
    impl->captured_.emplace(std::move(step));
  }
  return impl;
}

absl::Status ForwardRunner::Impl::Allocate() {
  const passes::MemoryPlan& memory = plan_.memory;
  const int64_t own = std::max<int64_t>(memory.arena_bytes - parameter_region_, 1);
  ASSIGN_OR_RETURN(runtime::DeviceBuffer arena, runtime::DeviceBuffer::Create(own));
  arena_.emplace(std::move(arena));
  base_ = static_cast<char*>(arena_->data()) - parameter_region_;
  // Poisoned, as the trainer's: a kernel that reads what nothing wrote shows NaN, not zeros.
  // On the trainer's stream, which the state's initial values then follow.
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaMemsetAsync(arena_->data(), 0xff, own, share_.stream->get()),
                          "cudaMemsetAsync", "the forward runner's arena"));
  ASSIGN_OR_RETURN(staging_,
                   runtime::PinnedBuffer::Create(std::max<int64_t>(memory.input_bytes, 1)));
  std::memset(staging_->data(), 0, staging_->bytes());
  return absl::OkStatus();
}

absl::Status ForwardRunner::Impl::PlaceParameters(const Trainer::Impl& trainer) {
  const Graph& g = plan_.graph();
  const passes::MemoryPlan& trainer_memory = trainer.plan().memory;
  const char* trainer_arena = static_cast<const char*>(share_.arena->data());
  for (passes::Buffer& b : plan_.memory.buffers) {
    if (b.cls != passes::BufferClass::kParameter) continue;
    const std::string& name = g.node(b.value.node).name;
    // CheckForwardParameters found it, of the same spec.
    ASSIGN_OR_RETURN(const Trainer::Impl::NamedTensor named,
                     trainer.Resolve(name, ir::ParameterOp(), "parameter"));
    const passes::Buffer* source = trainer_memory.Find({named.node, 0});
    if (source == nullptr) {
      return absl::InternalError(absl::StrCat("the trainer has no buffer for '", name, "'"));
    }
    const char* address = trainer_arena + source->offset + named.offset;
    b.offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(address) -
                                    reinterpret_cast<uintptr_t>(base_));
    shared_parameter_bytes_ += b.bytes;
  }
  return absl::OkStatus();
}

absl::Status ForwardRunner::Impl::InitLeaves(bool state_only) {
  const Graph& g = plan_.graph();
  cudaStream_t stream = share_.stream->get();
  for (const Node& node : g.nodes()) {
    if (!ir::IsLeaf(node) || node.op == &ir::ParameterOp()) continue;
    if (state_only && node.op != &ir::StateOp()) continue;
    const passes::Buffer* b = plan_.memory.Find({node.id, 0});
    if (b == nullptr) continue;
    ir::HostTensor host(node.outputs[0]);
    ir::FillInitial(node.init, seed_, node.name, host);
    if (b->cls == passes::BufferClass::kInput) {
      std::memcpy(static_cast<char*>(staging_->data()) + (b->offset - plan_.memory.input_offset),
                  host.raw(), b->bytes);
      continue;
    }
    // Stream-ordered after the queued runs; waited for before the host tensor goes.
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(base_ + b->offset, host.raw(), b->bytes, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync", absl::StrCat("initialising '", node.name, "'")));
    RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                                        absl::StrCat("initialising '", node.name, "'")));
  }
  return absl::OkStatus();
}

absl::Status ForwardRunner::Impl::SetInput(absl::string_view name, const void* data, size_t count,
                                           DType dtype) {
  const Graph& g = plan_.graph();
  absl::StatusOr<int32_t> id = g.FindNode(name);
  if (!id.ok() || g.node(*id).op != &ir::InputOp()) {
    return absl::NotFoundError(absl::StrCat("the forward graph has no input named '", name, "'"));
  }
  const TensorSpec& spec = g.node(*id).outputs[0];
  if (spec.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(),
                                                   "; got ", DTypeName(dtype), " data"));
  }
  if (static_cast<int64_t>(count) != spec.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(), " (",
                                                   spec.NumElements(), " elements); got ", count));
  }
  if (auto limit = limits_.find(name); limit != limits_.end()) {
    RETURN_IF_ERROR(CheckLabels(name, limit->second.consumer, limit->second.range,
                                {static_cast<const int32_t*>(data), count}));
  }
  RETURN_IF_ERROR(Synchronize());  // A queued run may still be copying the staging.
  const passes::Buffer* b = plan_.memory.Find({*id, 0});
  std::memcpy(static_cast<char*>(staging_->data()) + (b->offset - plan_.memory.input_offset), data,
              spec.bytes());
  return absl::OkStatus();
}

absl::Status ForwardRunner::Impl::Run() {
  cudaStream_t stream = share_.stream->get();
  // The trainer's weights, where its step left them elsewhere (src/api/settle_list.h).
  if (share_.settle != nullptr) RETURN_IF_ERROR(share_.settle->Settle(stream));
  if (captured_.has_value()) {
    RETURN_IF_ERROR(captured_->Replay(stream));
  } else {
    RETURN_IF_ERROR(lanes_->Run(launches_, stream, options_.mode == ExecMode::kSync));
  }
  ++runs_;
  return absl::OkStatus();
}

absl::Status ForwardRunner::Impl::Synchronize() {
  return runtime::CudaStatus(cudaStreamSynchronize(share_.stream->get()), "cudaStreamSynchronize",
                             "ForwardRunner");
}

absl::StatusOr<const passes::Buffer*> ForwardRunner::Impl::OutputBuffer(Value output) const {
  if (!output.MadeBy(graph_id_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the value (node ", output.node, ", output ", output.output,
                     ") was made by another graph than the one this runner runs"));
  }
  auto it = outputs_.find(output);
  if (it == outputs_.end()) {
    return absl::InvalidArgumentError(
        "not an output of this runner: name it in CompileForward's outputs");
  }
  const passes::Buffer* b = plan_.memory.Find(it->second);
  if (b == nullptr) return absl::InternalError("the runner's output has no buffer");
  return b;
}

absl::StatusOr<int64_t> ForwardRunner::Impl::OutputElements(Value output) const {
  ASSIGN_OR_RETURN(const passes::Buffer* b, OutputBuffer(output));
  return plan_.graph().spec(b->value).NumElements();
}

absl::Status ForwardRunner::Impl::ReadRaw(Value output, DType dtype, void* host, size_t count) {
  ASSIGN_OR_RETURN(const passes::Buffer* b, OutputBuffer(output));
  const TensorSpec& spec = plan_.graph().spec(b->value);
  if (spec.dtype != dtype || static_cast<int64_t>(count) != spec.NumElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the output is ", spec.ToString(), "; read as ", DTypeName(dtype)));
  }
  RETURN_IF_ERROR(Synchronize());
  return runtime::CudaStatus(
      cudaMemcpy(host, base_ + b->offset, spec.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy",
      absl::StrCat("reading '", plan_.graph().node(b->value.node).name, "'"));
}

absl::Status ForwardRunner::Impl::ResetState() {
  RETURN_IF_ERROR(Synchronize());
  return InitLeaves(/*state_only=*/true);
}

ForwardStats ForwardRunner::Impl::stats() const {
  ForwardStats s;
  s.runs = runs_;
  s.graph_replays = captured_.has_value() ? captured_->replays() : 0;
  s.graph_captures = captured_.has_value() ? captured_->captures() : 0;
  s.graph_nodes = captured_.has_value() ? captured_->num_nodes() : 0;
  s.launches_per_run = static_cast<int64_t>(launches_.size());
  s.arena_bytes = plan_.memory.arena_bytes - parameter_region_;
  s.shared_parameter_bytes = shared_parameter_bytes_;
  auto it = plan_.memory.bytes_by_class.find(passes::BufferClass::kOptimizerState);
  s.state_bytes = it == plan_.memory.bytes_by_class.end() ? 0 : it->second;
  s.activation_peak_bytes = plan_.memory.transient_peak;
  return s;
}

std::string ForwardStats::ToString() const {
  return absl::StrCat("runs=", runs, " replays=", graph_replays, " captures=", graph_captures,
                      " graph_nodes=", graph_nodes, " launches=", launches_per_run,
                      " arena_bytes=", arena_bytes,
                      " shared_parameter_bytes=", shared_parameter_bytes,
                      " state_bytes=", state_bytes, " activation_peak=", activation_peak_bytes);
}

ForwardRunner::ForwardRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ForwardRunner::~ForwardRunner() {
  // Queued runs read the runner's arena: let them finish before it goes.
  if (impl_ != nullptr) (void)impl_->Synchronize();
}

absl::Status ForwardRunner::SetInput(absl::string_view name, absl::Span<const float> data) {
  return impl_->SetInput(name, data.data(), data.size(), DType::kFloat32);
}
absl::Status ForwardRunner::SetInput(absl::string_view name, absl::Span<const int32_t> data) {
  return impl_->SetInput(name, data.data(), data.size(), DType::kInt32);
}
absl::Status ForwardRunner::Run() { return impl_->Run(); }
absl::StatusOr<std::vector<float>> ForwardRunner::Read(Value output) {
  ASSIGN_OR_RETURN(const int64_t n, impl_->OutputElements(output));
  std::vector<float> out(n);
  RETURN_IF_ERROR(impl_->ReadRaw(output, DType::kFloat32, out.data(), out.size()));
  return out;
}
absl::StatusOr<std::vector<int32_t>> ForwardRunner::ReadInt32(Value output) {
  ASSIGN_OR_RETURN(const int64_t n, impl_->OutputElements(output));
  std::vector<int32_t> out(n);
  RETURN_IF_ERROR(impl_->ReadRaw(output, DType::kInt32, out.data(), out.size()));
  return out;
}
absl::Status ForwardRunner::ResetState() { return impl_->ResetState(); }
absl::Status ForwardRunner::Synchronize() { return impl_->Synchronize(); }
ForwardStats ForwardRunner::stats() const { return impl_->stats(); }

const TrainOptions& Trainer::options() const { return impl_->options(); }

absl::StatusOr<std::unique_ptr<ForwardRunner>> Trainer::CompileForward(
    const Graph& graph, absl::Span<const Value> outputs) {
  return CompileForward(graph, outputs, ForwardOptions{});
}

absl::StatusOr<std::unique_ptr<ForwardRunner>> Trainer::CompileForward(
    const Graph& graph, absl::Span<const Value> outputs, const ForwardOptions& options) {
  // Parameters are read where the queued steps write them; matching needs none of them done.
  ASSIGN_OR_RETURN(std::unique_ptr<ForwardRunner::Impl> impl,
                   ForwardRunner::Impl::Create(*impl_, graph, outputs, options));
  return std::make_unique<ForwardRunner>(std::move(impl));
}

}  // namespace reprise
