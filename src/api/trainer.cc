#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capture/launch_profile.h"
#include "src/api/compile_options.h"
#include "src/api/initial_upload.h"
#include "src/api/input_checks.h"
#include "src/api/model_fingerprint.h"
#include "src/api/trainer_impl.h"
#include "src/api/trainer_kernels.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/conv_kernels.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/gelu_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/layer_norm_kernels.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/codegen/pooling_kernels.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ir/host_tensor.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/ops/attention.h"
#include "src/ops/batched.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/masked_loss.h"
#include "src/ops/mlp_step.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/transformer_ops.h"
#include "src/parallel/data_parallel_step.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/channels_last.h"
#include "src/passes/mixed_precision.h"
#include "src/runtime/cache_config.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/disk_cache.h"
#include "src/util/phase_timer.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

constexpr size_t kGemmWorkspaceBytes = 32 << 20;  // cuBLASLt's recommendation for Hopper.
// cuDNN's fastest convolution algorithms want more: 256 MiB per lane admits them at ResNet-50's
// shapes, and costs little beside a convolutional network's activations.
constexpr size_t kConvWorkspaceBytes = 256 << 20;

// Per-lane workspace: cuDNN convolutions get the larger one, cuDNN attention what its shapes may
// need.
size_t WorkspaceBytesFor(const Graph& graph) {
  return std::max(HasImages(graph) ? kConvWorkspaceBytes : kGemmWorkspaceBytes,
                  ops::AttentionWorkspaceBound(graph));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer::Impl>> Trainer::Impl::Create(const Graph& graph, Value loss,
                                                                     const TrainOptions& options) {
  absl::StatusOr<std::unique_ptr<Impl>> impl = Prepare(graph, loss, options);
  const absl::Status status = impl.ok() ? (*impl)->Start(nullptr) : impl.status();
  if (status.ok()) return impl;
  if (!options.parallel.data_parallel.has_value()) return status;
  // Named by rank, and recorded before this rank's communicator goes, so that the ranks of this
  // process that wait for this one stop at once.
  return parallel::RankFailed(*options.parallel.data_parallel, status);
}

absl::StatusOr<std::unique_ptr<Trainer::Impl>> Trainer::Impl::Prepare(const Graph& graph,
                                                                      Value loss,
                                                                      const TrainOptions& options) {
  util::PhaseTimer phases;
  // Options and graph are checked first, so that bad ones are refused without a GPU.
  RETURN_IF_ERROR(ValidateTrainOptions(options));
  RETURN_IF_ERROR(CheckValuesOfGraph(graph, loss, options.fetch));
  // There is no eager fallback: a step that cannot be captured is refused first, without a GPU.
  RETURN_IF_ERROR(ir::CheckCapturable(graph));
  phases.Mark("checks");
  if (options.launch.graph_launch == GraphLaunch::kDevice &&
      options.launch.mode != ExecMode::kGraph) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::launch.graph_launch = device launches the captured step graph "
                     "from the device; "
                     "mode ",
                     ExecModeName(options.launch.mode), " captures none (use ExecMode::kGraph)"));
  }
  ASSIGN_OR_RETURN(int devices, runtime::VisibleDeviceCount());
  if (devices == 0) {
    return absl::FailedPreconditionError("Trainer needs a CUDA device and none is visible");
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", options.device, " requested, but ", devices, " are visible"));
  }
  // The fuse pass plans the whole-step kernel for this device's SMs and shared memory.
  ASSIGN_OR_RETURN(const runtime::DeviceInfo device, runtime::UseDevice(options.device));
  phases.Mark("device (CUDA context)");
  ASSIGN_OR_RETURN(
      passes::CompiledStep compiled,
      passes::CompileStep(graph, loss,
                          CompileOptionsFor(options, ops::MlpTrainStepTargetFor(device))));
  phases.Mark("compile passes");
  const Graph& unfused_training = compiled.unfused_training;
  // Label inputs and the class count of the loss or table that indexes by them, read from the
  // unfused graph so that no fused op needs to say which of its inputs are labels.
  const std::vector<LabelUse> label_uses = LabelUsesOf(unfused_training);
  std::vector<std::string> weight_names = WeightNamesOf(unfused_training);
  auto impl = std::unique_ptr<Impl>(new Impl(options, std::move(compiled.plan)));
  impl->user_values_ = std::move(compiled.user_values);
  impl->weight_names_ = std::move(weight_names);
  impl->torch_names_ = TorchStateDictNamesOf(graph);
  impl->SetEnsemble(graph, std::move(compiled.batched), unfused_training);
  impl->model_fingerprint_ = ModelFingerprint(graph, loss, options.optimizer);
  impl->graph_id_ = graph.id();
  impl->data_parallel_buckets_ = std::move(compiled.data_parallel_buckets);
  for (const LabelUse& use : label_uses) {
    ASSIGN_OR_RETURN(const int32_t input, impl->plan_.graph().FindNode(use.input));
    // An input read as labels by several consumers (ids of two tables) takes the tightest range.
    const LabelLimit limit{use.classes, use.consumer, use.padding_allowed};
    auto [it, added] = impl->label_limits_.try_emplace(input, limit);
    if (!added && use.classes < it->second.classes) it->second = limit;
  }
  // The whole plan (gradients, optimizer and fused kernels too), before anything is allocated.
  RETURN_IF_ERROR(ir::CheckCapturable(impl->plan_.graph()));
  phases.Mark("plan checks and fingerprint");
  impl->create_phases_ = std::move(phases);
  return impl;
}

absl::Status Trainer::Impl::Start(const DeviceShare* share) {
  shares_device_ = share != nullptr;
  util::PhaseTimer& phases = create_phases_;
  if (share != nullptr) phases.Mark("shared resources and other buckets");
  RETURN_IF_ERROR(InitDevice(share));
  RETURN_IF_ERROR(InitPersistentTensors());
  RETURN_IF_ERROR(StartDataParallel());
  phases.Mark("data parallel");
  const absl::Time acquire_start = absl::Now();
  kernel_stats_at_create_ = kernels_->stats();
  const runtime::ConvGraphStats conv_before = runtime::CudnnConvGraph::Stats();
  const runtime::ConvLegacyStats legacy_before = runtime::LegacyConvStats();
  const ops::MatmulChoiceStats matmul_before = ops::MatmulChoices();
  ASSIGN_OR_RETURN(std::vector<runtime::KernelSource> prefetch, KernelsToPrefetch(plan_.graph()));
  std::function<void(int64_t, int64_t)> on_ready;
  if (const CompileProgressCallback& report = options_.on_compile_progress; report) {
    on_ready = [&report, acquire_start](int64_t done, int64_t total) {
      report({.done = done,
              .total = total,
              .elapsed_s = absl::ToDoubleSeconds(absl::Now() - acquire_start)});
    };
  }
  RETURN_IF_ERROR(kernels_->Prefetch(prefetch, on_ready));
  phases.Mark("kernels");

  capture::StepResources res;
  res.device = &device_;
  res.kernels = kernels_.get();
  res.lt = &*lt_;
  res.cudnn = &*cudnn_;
  res.arena = static_cast<char*>(arena_->data());
  res.workspace = workspaces_->lane(0);
  res.workspace_bytes = WorkspaceReserve();
  for (int lane = 1; lane < plan_.compute_lanes(); ++lane) {
    res.lane_workspaces.push_back(workspaces_->lane(lane));
  }
  for (int lane = 0; lane < plan_.compute_lanes(); ++lane) {
    res.lane_tickets.push_back(workspaces_->tickets(lane));
  }
  res.ticket_words = runtime::LaneWorkspaces::kTicketWords;
  res.input_staging = staging_->data();
  res.lowering = LoweringOptionsFor(options_);
  res.communicator = communicator_.get();
  // Measuring algorithms runs them in the workspaces; heuristics read none of it.
  if (options_.kernels.measure_conv_algorithms || options_.kernels.measure_matmul_algorithms) {
    RETURN_IF_ERROR(workspaces_->MapAll());
  }
  ASSIGN_OR_RETURN(capture::LoweredStep lowered, capture::LowerPlan(plan_, res));
  launches_ = std::move(lowered.launches);
  input_copy_ = lowered.input_copy;
  for (const capture::LoweredLaunch& launch : launches_) {
    if (launch.kernel->NeedsSettle()) settle_->Add(this, launch.kernel.get());
  }
  phases.Mark("lowering (cuBLASLt heuristics, cuDNN plans)");
  RETURN_IF_ERROR(BackWorkspaces());
  phases.Mark("workspaces");
  kernel_acquire_ms_ = absl::ToDoubleMilliseconds(absl::Now() - acquire_start);
  kernel_stats_after_create_ = kernels_->stats();
  conv_plans_built_ = runtime::CudnnConvGraph::Stats().Since(conv_before);
  conv_legacy_built_ = runtime::LegacyConvStats().Since(legacy_before);
  matmul_choices_ = ops::MatmulChoices().Since(matmul_before);
  ASSIGN_OR_RETURN(lanes_, capture::Lanes::Create(launches_));
  RETURN_IF_ERROR(WarmUpCollectives());
  phases.Mark("lanes");
  if (options_.launch.mode == ExecMode::kGraph) {
    ASSIGN_OR_RETURN(capture::CapturedStep step, CaptureStep(launches_, *lanes_));
    captured_.emplace(std::move(step));
    phases.Mark("capture and instantiation");
  }
  return absl::OkStatus();
}

absl::StatusOr<capture::CapturedStep> Trainer::Impl::CaptureStep(
    absl::Span<const capture::LoweredLaunch> launches, const capture::Lanes& lanes) {
  using Launch = capture::CapturedStep::Launch;
  Launch launch = options_.launch.graph_launch == GraphLaunch::kHost     ? Launch::kHost
                  : options_.launch.graph_launch == GraphLaunch::kDevice ? Launch::kDevice
                                                                         : Launch::kAuto;
  // A step captured again (Verify's) launches as the trainer's own does once its trial has chosen.
  if (launch == Launch::kAuto && captured_.has_value() && !captured_->launch_measuring()) {
    launch = captured_->launch();
  }
  // NCCL's collectives inside a device-launched graph have not run on a GPU pair yet.
  if (launch == Launch::kAuto && options_.parallel.data_parallel.has_value()) {
    launch = Launch::kHost;
    host_launch_reason_ = "data parallel: device launch of NCCL's collectives is untested";
  } else if (launch == Launch::kAuto && shares_device_) {
    // Each device-launched graph holds device memory of its own (36 MiB for a small MLP on an
    // H200, docs/results/history/2026-11-28_19049ae.md), which would undo what one arena for
    // every bucket saves.
    launch = Launch::kHost;
    host_launch_reason_ = "shape bucket: a device-launched graph holds device memory per bucket";
  }
  return capture::CapturedStep::Capture(launches, lanes, stream_->get(), launch);
}

int Trainer::Impl::WorkspaceLanes() const { return plan_.compute_lanes(); }

size_t Trainer::Impl::WorkspaceReserve() const { return WorkspaceBytesFor(plan_.graph()); }

absl::Status Trainer::Impl::BackWorkspaces() {
  std::vector<size_t> needs(WorkspaceLanes(), 0);
  for (const capture::LoweredLaunch& launch : launches_) {
    if (launch.lane >= WorkspaceLanes()) continue;  // The communication lane has none.
    needs[launch.lane] = std::max(needs[launch.lane], launch.kernel->WorkspaceBytes());
  }
  size_t total = 0;
  for (size_t need : needs) total += need;
  if (absl::Status backed = workspaces_->Settle(needs); !backed.ok()) {
    return OutOfMemory("the lanes' workspaces", static_cast<int64_t>(total), backed);
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::Impl::DeviceShare> Trainer::Impl::NewDeviceShare(int64_t arena_bytes,
                                                                         int lanes,
                                                                         size_t workspace_reserve) {
  create_phases_.Mark("device (CUDA context)");  // UseDevice; for buckets, all that came before.
  DeviceShare share;
  // Lane 0 runs on this stream: the data-gradient chain, the step's critical path, whose blocks
  // should go first where the other lanes' kernels compete for the multiprocessors.
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::CreateHighestPriority());
  share.stream = std::make_shared<runtime::Stream>(std::move(stream));
  const absl::StatusOr<int64_t> used_before_handles = runtime::DeviceMemoryInUse();
  ASSIGN_OR_RETURN(runtime::LtHandle lt, runtime::LtHandle::Create());
  share.lt = std::make_shared<runtime::LtHandle>(std::move(lt));
  ASSIGN_OR_RETURN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  share.cudnn = std::make_shared<runtime::CudnnHandle>(std::move(cudnn));
  const absl::StatusOr<int64_t> used_after_handles = runtime::DeviceMemoryInUse();
  if (used_before_handles.ok() && used_after_handles.ok()) {
    share.library_handle_bytes = std::max<int64_t>(0, *used_after_handles - *used_before_handles);
    library_handle_bytes_ = share.library_handle_bytes;  // For OutOfMemory's breakdown.
  }
  create_phases_.Mark("stream and library handles (cuBLASLt, cuDNN)");
  absl::StatusOr<runtime::DeviceBuffer> arena = runtime::DeviceBuffer::Create(arena_bytes);
  if (!arena.ok()) return OutOfMemory("the arena", arena_bytes, arena.status());
  share.arena = std::make_shared<runtime::DeviceBuffer>(*std::move(arena));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::LaneWorkspaces> workspaces,
                   runtime::LaneWorkspaces::Create(lanes, workspace_reserve));
  share.workspaces = std::move(workspaces);
  share.settle = std::make_shared<SettleList>();
  // Poison the arena so a kernel that reads what nothing wrote shows up as NaN, not as zeros.
  RETURN_IF_ERROR(runtime::CudaStatus(cudaMemset(share.arena->data(), 0xff, arena_bytes),
                                      "cudaMemset", "arena"));
  create_phases_.Mark("arena and workspaces");
  return share;
}

absl::Status Trainer::Impl::InitDevice(const DeviceShare* share) {
  ASSIGN_OR_RETURN(device_, runtime::UseDevice(options_.device));
  if (device_.cc_major < 8) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device_.name, " has compute capability ", device_.cc_major, ".",
                     device_.cc_minor, "; reprise needs 8.0 or newer"));
  }
  std::optional<DeviceShare> own;
  if (share == nullptr) {
    ASSIGN_OR_RETURN(
        own, NewDeviceShare(plan_.memory.arena_bytes, WorkspaceLanes(), WorkspaceReserve()));
    share = &*own;
  }
  stream_ = share->stream;
  lt_ = share->lt;
  cudnn_ = share->cudnn;
  arena_ = share->arena;
  workspaces_ = share->workspaces;
  library_handle_bytes_ = share->library_handle_bytes;
  settle_ = share->settle;
  kernels_ = SharedKernelStore(device_);
  ASSIGN_OR_RETURN(staging_,
                   runtime::PinnedBuffer::Create(std::max<int64_t>(plan_.memory.input_bytes, 1)));
  create_phases_.Mark("kernel store and staging");
  return absl::OkStatus();
}

absl::Status Trainer::Impl::InitPersistentTensors() {
  const Graph& g = plan_.graph();
  util::PhaseTimer& phases = create_phases_;
  constexpr absl::string_view kDraw = "initial values (CPU)";
  constexpr absl::string_view kUpload = "initial values (upload)";
  std::memset(staging_->data(), 0, staging_->bytes());
  InitialUpload upload;  // Large weights: drawn into pinned pieces, copied while the next is drawn.
  for (const Node& node : g.nodes()) {
    if (!ir::IsLeaf(node)) continue;
    const passes::Buffer* b = plan_.memory.Find({node.id, 0});
    char* device = static_cast<char*>(arena_->data()) + b->offset;
    auto stacked = stacked_leaves_.find(node.name);
    // A leaf of the arena with an initialiser of its own (not an input, not an ensemble's slice).
    const bool own_arena_leaf =
        b->cls != passes::BufferClass::kInput && stacked == stacked_leaves_.end();
    if (stacked == stacked_leaves_.end() && ir::WritesZeroBits(node.init)) {
      // The bits FillInitial would write, without drawing them on the host and copying them
      // over: an input's are the staging memset's above (ResNet-50's b256 images: 77 MB);
      // optimizer moments, biases, ... are set on the device (GPT-2 124M's Adam moments: 1 GB).
      if (b->cls == passes::BufferClass::kInput) continue;
      RETURN_IF_ERROR(runtime::CudaStatus(cudaMemset(device, 0, b->bytes), "cudaMemset",
                                          absl::StrCat("initialising '", node.name, "'")));
      phases.Mark(kUpload);
      continue;
    }
    const TensorSpec& spec = node.outputs[0];
    if (own_arena_leaf && spec.dtype == DType::kFloat32 &&
        spec.NumElements() >= InitialUpload::kMinElements) {
      RETURN_IF_ERROR(
          upload.Upload(node.init, options_.seed, node.name, spec.NumElements(), device, phases));
      continue;
    }
    ir::HostTensor host(spec);
    if (stacked != stacked_leaves_.end()) {
      // Each model's slice starts as that model would alone (ensemble batching).
      host = passes::InitialStackedValue(*stacked->second, spec, options_.seed);
    } else {
      ir::FillInitial(node.init, options_.seed, node.name, host);
    }
    phases.Mark(kDraw);
    if (b->cls == passes::BufferClass::kInput) {
      std::memcpy(static_cast<char*>(staging_->data()) + (b->offset - plan_.memory.input_offset),
                  host.raw(), b->bytes);
    } else {
      RETURN_IF_ERROR(
          runtime::CudaStatus(cudaMemcpy(device, host.raw(), b->bytes, cudaMemcpyHostToDevice),
                              "cudaMemcpy", absl::StrCat("initialising '", node.name, "'")));
    }
    phases.Mark(kUpload);
  }
  // The arena's cudaMemset and these pageable cudaMemcpy calls run on the legacy stream and may
  // still be in flight when they return; the step's non-blocking stream does not wait for the
  // legacy stream, so the first step could read half-initialised tensors. Wait for them once.
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                                      "cudaStreamSynchronize", "the initial values"));
  phases.Mark(kUpload);
  return absl::OkStatus();
}

Trainer::Impl::~Impl() {
  if (settle_ == nullptr) return;
  // Nothing can be returned from here: a failure shows in the next CUDA call of whoever still
  // uses the device.
  if (stream_ != nullptr) settle_->Settle(stream_->get()).IgnoreError();
  settle_->Remove(this);
}

absl::Status Trainer::Impl::SettleParameters() {
  return settle_ == nullptr ? absl::OkStatus() : settle_->Settle(stream_->get());
}

absl::Status Trainer::Impl::SettleGuardCounters() const {
  return settle_ == nullptr ? absl::OkStatus() : settle_->SettleCounters(stream_->get());
}

absl::Status Trainer::Impl::WaitForLastStep() {
  if (!step_queued_) return absl::OkStatus();
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream_->get()),
                                      "cudaStreamSynchronize", "waiting for the last step"));
  step_queued_ = false;
  return absl::OkStatus();
}

absl::Status Trainer::Impl::CheckLabels(int32_t input_node,
                                        absl::Span<const int32_t> labels) const {
  auto it = label_limits_.find(input_node);
  if (it == label_limits_.end()) return absl::OkStatus();
  const LabelLimit& limit = it->second;
  return reprise::CheckLabels(plan_.graph().node(input_node).name, limit.consumer,
                              {limit.classes, limit.padding_allowed}, labels);
}

absl::Status Trainer::Impl::SetInput(absl::string_view name, const void* data, size_t count,
                                     DType dtype) {
  ASSIGN_OR_RETURN(const NamedTensor input, FindInputTensor(name));
  RETURN_IF_ERROR(CheckNotBound(input));
  const int32_t* id = &input.node;
  const TensorSpec& spec = input.spec;
  if (spec.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(),
                                                   "; got ", DTypeName(dtype), " data"));
  }
  if (static_cast<int64_t>(count) != spec.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(), " (",
                                                   spec.NumElements(), " elements); got ", count));
  }
  if (dtype == DType::kInt32) {
    RETURN_IF_ERROR(CheckLabels(*id, {static_cast<const int32_t*>(data), count}));
  } else if (count == 1) {  // The optimizer's scalar inputs (learning_rate, momentum, ...).
    RETURN_IF_ERROR(
        CheckHyperparameterInput(plan_.graph().node(*id).name, *static_cast<const float*>(data)));
  }
  RETURN_IF_ERROR(WaitForLastStep());
  const passes::Buffer* b = plan_.memory.Find({*id, 0});
  std::memcpy(
      static_cast<char*>(staging_->data()) + (b->offset - plan_.memory.input_offset) + input.offset,
      data, spec.bytes());
  return absl::OkStatus();
}

absl::Status Trainer::Impl::Step() {
  // NonFinitePolicy::kStop, once a call that waited found the stop: no device read here.
  RETURN_IF_ERROR(non_finite_stop_);
  const absl::Time start = absl::Now();
  cudaStream_t stream = stream_->get();
  RETURN_IF_ERROR(settle_->BeforeStep(this, stream));  // Another bucket's double buffers.
  if (captured_.has_value()) {
    RETURN_IF_ERROR(captured_->Replay(stream));
  } else {
    RETURN_IF_ERROR(lanes_->Run(launches_, stream, options_.launch.mode == ExecMode::kSync));
  }
  step_queued_ = true;
  ++steps_;
  step_host_us_.Add(absl::ToDoubleMicroseconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status Trainer::Impl::WaitForQueued() {
  RETURN_IF_ERROR(WaitForLastStep());
  return runtime::CudaStatus(cudaStreamSynchronize(stream_->get()), "cudaStreamSynchronize",
                             "Trainer::Synchronize");
}

absl::Status Trainer::Impl::Synchronize() {
  RETURN_IF_ERROR(WaitForQueued());
  return CheckNonFiniteStop();
}

absl::StatusOr<std::vector<float>> Trainer::Impl::TimeSteps(int steps) {
  if (steps <= 0) return absl::InvalidArgumentError("TimeSteps needs a positive step count");
  std::vector<runtime::Event> marks;
  for (int i = 0; i <= steps; ++i) {
    ASSIGN_OR_RETURN(runtime::Event e, runtime::Event::Create(cudaEventDefault));
    marks.push_back(std::move(e));
  }
  RETURN_IF_ERROR(Synchronize());
  for (int i = 0; i < steps; ++i) {
    RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(marks[i].get(), stream_->get()),
                                        "cudaEventRecord", "TimeSteps"));
    RETURN_IF_ERROR(Step());
  }
  RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(marks[steps].get(), stream_->get()),
                                      "cudaEventRecord", "TimeSteps"));
  RETURN_IF_ERROR(Synchronize());
  std::vector<float> ms;
  for (int i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(float t, runtime::ElapsedMs(marks[i], marks[i + 1]));
    ms.push_back(t);
  }
  return ms;
}

absl::StatusOr<std::vector<Trainer::LaunchTime>> Trainer::Impl::ProfileLaunches(int repeats) {
  RETURN_IF_ERROR(Synchronize());
  ASSIGN_OR_RETURN(std::vector<capture::LaunchTime> times,
                   capture::ProfileLaunches(launches_, stream_->get(), repeats));
  std::vector<Trainer::LaunchTime> out;
  for (capture::LaunchTime& t : times) {
    out.push_back({std::move(t.node), std::move(t.kernel), t.lane, t.median_ms});
  }
  return out;
}

absl::StatusOr<std::vector<Trainer::LaunchSpan>> Trainer::Impl::TimeLanes(int repeats) {
  RETURN_IF_ERROR(Synchronize());
  ASSIGN_OR_RETURN(std::vector<capture::LaunchSpan> spans,
                   capture::TimeLanes(launches_, *lanes_, stream_->get(), repeats));
  std::vector<Trainer::LaunchSpan> out;
  for (capture::LaunchSpan& s : spans) {
    out.push_back(
        {std::move(s.node), std::move(s.kernel), s.lane, std::move(s.waits), s.start_ms, s.end_ms});
  }
  return out;
}

absl::Status Trainer::Impl::CheckUserValue(Value value) const {
  if (value.MadeBy(graph_id_)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Read: the value (node ", value.node, ", output ", value.output,
                   ") was made by another graph than the one this trainer trains"));
}

absl::StatusOr<std::vector<float>> Trainer::Impl::ReadFloat(Value value) {
  const passes::Buffer* b = plan_.memory.Find(value);
  if (b == nullptr ||
      (b->cls != passes::BufferClass::kFetched && b->cls != passes::BufferClass::kParameter &&
       b->cls != passes::BufferClass::kOptimizerState)) {
    return absl::InvalidArgumentError(
        "value is not readable after a step: name it in TrainOptions::fetch");
  }
  if (plan_.graph().spec(value).dtype != DType::kFloat32) {
    return absl::InvalidArgumentError("only f32 values can be read as floats");
  }
  if (b->cls != passes::BufferClass::kFetched) RETURN_IF_ERROR(SettleParameters());
  // A parameter stays readable after a NonFinitePolicy::kStop: the weights the stop kept.
  RETURN_IF_ERROR(b->cls == passes::BufferClass::kParameter ? WaitForQueued() : Synchronize());
  std::vector<float> out(b->bytes / sizeof(float));
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpy(out.data(), static_cast<char*>(arena_->data()) + b->offset, b->bytes,
                 cudaMemcpyDeviceToHost),
      "cudaMemcpy", absl::StrCat("reading '", plan_.graph().node(value.node).name, "'")));
  return out;
}

absl::StatusOr<const passes::Buffer*> Trainer::Impl::ParameterBuffer(absl::string_view name) const {
  auto id = plan_.graph().FindNode(name);
  if (!id.ok() || plan_.graph().node(*id).op != &ir::ParameterOp()) {
    return absl::NotFoundError(absl::StrCat("no parameter named '", name, "'"));
  }
  return plan_.memory.Find({*id, 0});
}

absl::StatusOr<std::vector<float>> Trainer::Impl::GetParameter(absl::string_view name) {
  ASSIGN_OR_RETURN(const NamedTensor t, Resolve(name, ir::ParameterOp(), "parameter"));
  ASSIGN_OR_RETURN(std::vector<float> all, ReadFloat(Value{t.node, 0}));
  const int64_t first = t.offset / static_cast<int64_t>(sizeof(float));
  return std::vector<float>(all.begin() + first, all.begin() + first + t.spec.NumElements());
}

absl::Status Trainer::Impl::SetParameter(absl::string_view name, absl::Span<const float> data) {
  ASSIGN_OR_RETURN(const NamedTensor t, Resolve(name, ir::ParameterOp(), "parameter"));
  const passes::Buffer* whole = plan_.memory.Find({t.node, 0});
  const passes::Buffer slice{.value = whole->value,
                             .cls = whole->cls,
                             .offset = whole->offset + t.offset,
                             .bytes = t.spec.bytes()};
  const passes::Buffer* b = &slice;
  if (t.spec.dtype != DType::kFloat32 ||
      data.size() * sizeof(float) != static_cast<size_t>(b->bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is ", t.spec.ToString(),
                                                   "; got ", data.size(), " float values"));
  }
  RETURN_IF_ERROR(SettleParameters());  // Else the next step would read the other buffer.
  RETURN_IF_ERROR(Synchronize());
  // On the step's stream, and waited for: a plain cudaMemcpy from pageable memory may return
  // before the copy lands, and the step's stream does not order itself after the legacy stream.
  const std::string context = absl::StrCat("writing '", name, "'");
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpyAsync(static_cast<char*>(arena_->data()) + b->offset, data.data(), b->bytes,
                      cudaMemcpyHostToDevice, stream_->get()),
      "cudaMemcpyAsync", context));
  return runtime::CudaStatus(cudaStreamSynchronize(stream_->get()), "cudaStreamSynchronize",
                             context);
}

std::vector<std::string> Trainer::Impl::ParameterNames() const {
  if (!user_parameter_names_.empty()) return user_parameter_names_;  // Batched: the user's order.
  std::vector<std::string> names;
  for (int32_t id : plan_.graph().NodesOf("parameter"))
    names.push_back(plan_.graph().node(id).name);
  return names;
}

}  // namespace reprise
