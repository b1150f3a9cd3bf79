// Trainer::Impl: owns the plan, the device resources and the executor of one training step.
#ifndef REPRISE_SRC_API_TRAINER_IMPL_H_
#define REPRISE_SRC_API_TRAINER_IMPL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "capture/executor.h"
#include "capture/lowered_step.h"
#include "reprise/trainer.h"
#include "src/api/settle_list.h"
#include "src/api/torch_state_dict.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/parallel/communicator.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/channels_last.h"
#include "src/passes/plan.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/cudnn_conv_record.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/lane_workspaces.h"
#include "src/runtime/lt_matmul.h"
#include "src/runtime/owners.h"
#include "src/util/phase_timer.h"
#include "src/util/running_stats.h"
#include "src/util/safetensors.h"

namespace reprise {

class Trainer::Impl {
 public:
  // Settles this plan's kernels (SettleList) so that a forward runner still reading the arena
  // sees every weight in its own buffer.
  ~Impl();
  static absl::StatusOr<std::unique_ptr<Impl>> Create(const Graph& graph, Value loss,
                                                      const TrainOptions& options);
  // Create in two stages, for shape buckets (src/api/bucketed_trainer.cc), which lay several
  // plans out in one arena between them. Prepare plans the step (host work and the device's
  // properties; an uncapturable plan is refused here, before anything is allocated). Start
  // allocates the device resources (or adopts `share`'s), initialises the persistent tensors,
  // compiles, lowers and captures.
  struct DeviceShare;
  static absl::StatusOr<std::unique_ptr<Impl>> Prepare(const Graph& graph, Value loss,
                                                       const TrainOptions& options);
  absl::Status Start(const DeviceShare* share);
  // Device resources that a BucketedTrainer's buckets share: one stream, so that their steps
  // never overlap; one arena laid out for all of them; one workspace; one pair of library handles.
  struct DeviceShare {
    std::shared_ptr<runtime::Stream> stream;
    std::shared_ptr<runtime::LtHandle> lt;
    std::shared_ptr<runtime::CudnnHandle> cudnn;
    std::shared_ptr<runtime::DeviceBuffer> arena;
    std::shared_ptr<runtime::LaneWorkspaces> workspaces;
    int64_t library_handle_bytes = -1;
    std::shared_ptr<SettleList> settle;  // Of every plan on the arena (src/api/settle_list.h).
  };
  // After Prepare: creates the resources for an arena of `arena_bytes` (poisoned with NaNs) and
  // `lanes` workspaces reserved at `workspace_reserve` bytes each (backed once lowering has chosen
  // the algorithms); ResourceExhausted as Create's.
  absl::StatusOr<DeviceShare> NewDeviceShare(int64_t arena_bytes, int lanes,
                                             size_t workspace_reserve);
  int WorkspaceLanes() const;       // This plan's compute lanes.
  size_t WorkspaceReserve() const;  // The most one of its algorithms may use per lane.
  // Before Start: shape buckets move the plan's tensors to their places in the shared arena.
  passes::MemoryPlan& mutable_memory() { return plan_.memory; }
  const std::vector<std::string>& weight_names() const { return weight_names_; }

  absl::Status SetInput(absl::string_view name, const void* data, size_t count, DType dtype);
  absl::StatusOr<void*> InputBuffer(absl::string_view name, DType dtype);
  absl::Status BindInput(absl::string_view name, const void* data, size_t bytes);
  // For benchmarks and tests of the update paths (src/api/update_paths.h), never needed to train:
  // records the step again with nothing changed and applies it to the executable graph as `apply`
  // says (cudaGraphExecUpdate, or a forced new instantiation), so that each path's cost can be
  // measured and its counters checked. Counted under the re-capture reason kForcedRecapture.
  // FailedPrecondition unless the step is captured (ExecMode::kGraph).
  static constexpr char kForcedRecapture[] = "forced (Trainer::Impl::ForceRecapture)";
  absl::Status ForceRecapture(capture::CapturedStep::Apply apply);
  absl::Status Step();
  absl::Status Synchronize();
  absl::StatusOr<std::vector<float>> TimeSteps(int steps);
  absl::StatusOr<std::vector<Trainer::LaunchTime>> ProfileLaunches(int repeats);
  absl::StatusOr<std::vector<Trainer::LaunchSpan>> TimeLanes(int repeats);
  // `value` is a value of the plan's graph (see Plan::MapValue for the user's values).
  absl::StatusOr<std::vector<float>> ReadFloat(Value value);
  absl::StatusOr<std::vector<float>> GetParameter(absl::string_view name);
  absl::Status SetParameter(absl::string_view name, absl::Span<const float> data);
  std::vector<std::string> ParameterNames() const;
  // In trainer_weights.cc.
  absl::Status SaveWeights(const std::string& path, const SaveWeightsOptions& options);
  absl::Status LoadWeights(const std::string& path, const LoadWeightsOptions& options);
  // The parameters and state of `training` (the graph before fusion, which may add state of its
  // own to the plan's), by name: what SaveWeights writes and LoadWeights reads.
  static std::vector<std::string> WeightNamesOf(const Graph& training);
  TrainerStats stats() const;
  // In trainer_checkpoint.cc.
  absl::Status SaveCheckpoint(const std::string& path);
  absl::Status RestoreCheckpoint(const std::string& path);
  // In trainer_verify.cc. A test-only fault for Verify: a launch added after the input copy sets
  // the float32 scalar input `frozen_input` to a value taken from the host by value when it is
  // launched, and that value changes with the verify step, as a host-side scalar read when a graph
  // is captured would: eager runs see each step's value, the captured graph the first one.
  struct VerifyFault {
    std::string frozen_input;  // Empty: no fault.
  };
  absl::StatusOr<VerifyResult> Verify(int steps, const VerifyFault& fault = {});
  // In trainer_loss_scale.cc: loss scaling's state, read from the device after the queued steps;
  // none when loss scaling is off.
  absl::StatusOr<std::optional<TrainerReport::LossScaleState>> ReadLossScale() const;
  // In trainer_non_finite.cc: the non-finite guard's state (TrainOptions::numerics.non_finite),
  // read from the device after the queued steps; none with kIgnore and no loss scaling.
  absl::StatusOr<std::optional<TrainerReport::NonFiniteState>> ReadNonFinite() const;
  // NonFinitePolicy::kStop, after the stream is synchronised: once the guard's record holds a
  // non-finite step, the Status naming it and the first non-finite tensor (kept, and returned by
  // every later call); OK otherwise and under the other policies.
  absl::Status CheckNonFiniteStop();
  // In trainer_report.cc.
  TrainerReport Report() const;
  // Prints Report().ToText() to stderr when the environment has REPRISE_REPORT=1.
  void PrintReportIfAsked() const;
  // ResourceExhausted for a failed allocation of `what` at Create: the bytes asked for, the
  // memory plan's breakdown and the device's free memory; `cause` is the allocator's Status.
  absl::Status OutOfMemory(absl::string_view what, int64_t bytes, const absl::Status& cause) const;
  // The safetensors dtype of a graph dtype (trainer_weights.cc).
  static util::SafetensorsDType FileDType(DType dtype);
  const passes::Plan& plan() const { return plan_; }
  // What a ForwardRunner (src/api/forward_runner.cc) shares with its trainer: the stream, library
  // handles, arena (where it reads the parameters) and workspaces, the kernel store and device.
  DeviceShare SharedDevice() const {
    return {stream_, lt_, cudnn_, arena_, workspaces_, library_handle_bytes_, settle_};
  }
  // Enqueues what brings every parameter and optimizer state of the arena back to its own buffer
  // (SettleList): before anything outside a step reads or writes them.
  absl::Status SettleParameters();
  // Enqueues only what brings the non-finite guard's counters up to date (SettleList::
  // SettleCounters): before they are read between steps.
  absl::Status SettleGuardCounters() const;
  const std::shared_ptr<runtime::KernelStore>& kernel_store() const { return kernels_; }
  const runtime::DeviceInfo& device() const { return device_; }
  const TrainOptions& options() const { return options_; }
  // For tests and dumps (src/api/model_dump.h): the lowered launches and, in ExecMode::kGraph, the
  // captured step (null otherwise).
  const std::vector<capture::LoweredLaunch>& launches() const { return launches_; }
  const capture::CapturedStep* captured() const {
    return captured_.has_value() ? &*captured_ : nullptr;
  }
  Value loss() const { return plan_.training.loss; }
  // Values of the user's graph -> values of the graph the plan was built from.
  const passes::LayoutValueMap& user_values() const { return user_values_; }
  // InvalidArgument for a value another graph made (not the user graph or a copy of it).
  absl::Status CheckUserValue(Value value) const;
  // Values of the user's graph -> values after ensemble batching (src/passes/batch_ensemble.h),
  // which user_values() then maps.
  absl::StatusOr<passes::ModelValue> MapEnsembleValue(Value user) const {
    return ensemble_.Map(user);
  }

  // A tensor the user names: a whole leaf of the plan's graph, or, under a model's own name, its
  // slice of a stacked leaf (ensemble batching; trainer_ensemble.cc).
  struct NamedTensor {
    int32_t node = -1;   // The leaf in the plan's graph.
    int64_t offset = 0;  // Bytes into the leaf's buffer.
    TensorSpec spec;     // The named tensor's own spec.
  };
  // The leaf of op `kind` (input, parameter) called `name`, or NotFound naming `what`.
  absl::StatusOr<NamedTensor> Resolve(absl::string_view name, const ir::OpDef& kind,
                                      absl::string_view what) const;

 private:
  Impl(TrainOptions options, passes::Plan plan)
      : options_(std::move(options)), plan_(std::move(plan)) {}
  absl::Status InitDevice(const DeviceShare* share);
  // After lowering: backs each lane's workspace as far as its chosen algorithms need.
  absl::Status BackWorkspaces();
  // Captures `launches` on the trainer's stream for the launch TrainOptions::launch.graph_launch
  // asks for.
  absl::StatusOr<capture::CapturedStep> CaptureStep(
      absl::Span<const capture::LoweredLaunch> launches, const capture::Lanes& lanes);
  absl::Status InitPersistentTensors();
  // Data parallelism, in trainer_data_parallel.cc: after the weights are initialised, joins the
  // job, checks every rank runs the same step and takes rank 0's weights; after lowering, runs the
  // collectives once so that NCCL connects its peers before capture. No-ops without it.
  absl::Status StartDataParallel();
  absl::Status WarmUpCollectives();
  absl::StatusOr<const passes::Buffer*> ParameterBuffer(absl::string_view name) const;
  // Waits until no queued step still reads the input staging or writes the arena: a stream
  // synchronisation, so that Step() itself makes one driver call (the launch), no event record.
  absl::Status WaitForLastStep();
  // Waits for every queued launch on the stream; Synchronize() is this, then the non-finite stop
  // (CheckNonFiniteStop). Reading parameters and SaveWeights use this alone: they still work after
  // a stop, to keep the weights the stop kept.
  absl::Status WaitForQueued();
  absl::Status CheckLabels(int32_t input_node, absl::Span<const int32_t> labels) const;
  // Keeps what ensemble batching did to `user` (the user's graph): `batched`'s value map and
  // stacked leaves, the per-model names of the stacked tensors of `training` (its training
  // graph), and the user's parameter names in the user's order.
  void SetEnsemble(const Graph& user, passes::BatchedGraph batched, const Graph& training);
  // The input node called `name`, or NotFound.
  absl::StatusOr<int32_t> FindInput(absl::string_view name) const;
  // The input called `name`, or a model's slice of a stacked input so named; else NotFound.
  absl::StatusOr<NamedTensor> FindInputTensor(absl::string_view name) const;
  void* InputSlot(int32_t input) const;  // The input's place in the arena.
  // FailedPrecondition if the input is bound to caller memory (SetInput would be overwritten).
  absl::Status CheckNotBound(int32_t input) const;
  absl::Status CheckNotBound(const NamedTensor& input) const;  // Its slice of the input.
  // The arena buffers of weight_names_, in that order.
  absl::StatusOr<std::vector<const passes::Buffer*>> WeightBuffers() const;
  // Copies `bytes` of the arena buffer of `name`'s output 0 to `host` after the queued work (a
  // stream-ordered copy to pageable memory: it returns once done).
  absl::Status ReadNamed(absl::string_view name, void* host, int64_t bytes) const;
  // The first tensor of the plan holding an inf or a NaN in one eager run of the step with the
  // inputs bound now (every launch in plan order on one stream), the arena restored after; its
  // description, or "" if none.
  absl::StatusOr<std::string> FirstNonFiniteTensor();

  TrainOptions options_;
  passes::Plan plan_;
  runtime::DeviceInfo device_;
  std::shared_ptr<runtime::Stream> stream_;  // The resources of a DeviceShare.
  std::shared_ptr<runtime::LtHandle> lt_;
  std::shared_ptr<runtime::CudnnHandle> cudnn_;
  std::shared_ptr<runtime::KernelStore> kernels_;  // Shared by the process's trainers.
  runtime::KernelStore::Stats kernel_stats_at_create_, kernel_stats_after_create_;
  // The convolution plans Create built (the process-wide counts' growth during it).
  runtime::ConvGraphStats conv_plans_built_;
  runtime::ConvLegacyStats conv_legacy_built_;
  // The cuBLASLt choices Create measured or took from records (the process-wide counts' growth).
  ops::MatmulChoiceStats matmul_choices_;
  double kernel_acquire_ms_ = 0;
  util::PhaseTimer create_phases_;  // Create's wall time by phase (TrainerStats::create_ms).
  std::shared_ptr<runtime::DeviceBuffer> arena_;
  std::shared_ptr<runtime::LaneWorkspaces> workspaces_;
  std::shared_ptr<SettleList> settle_;
  std::optional<runtime::PinnedBuffer> staging_;  // Host mirror of the arena's input region.
  // Data parallelism (trainer_data_parallel.cc): the ranks' collectives, which the launches call
  // (so it outlives them), and the plan's buckets, which ranks compare at start.
  std::unique_ptr<parallel::Communicator> communicator_;
  std::string data_parallel_buckets_;
  std::vector<capture::LoweredLaunch> launches_;
  capture::InputCopy* input_copy_ = nullptr;  // Launch 0's kernel, where bindings go.
  std::optional<capture::Lanes> lanes_;
  std::optional<capture::CapturedStep> captured_;
  // Why the trainer itself turned kAuto to kHost (data parallel, or a shape bucket); "" otherwise.
  std::string host_launch_reason_;
  bool shares_device_ = false;  // A BucketedTrainer's bucket: kAuto launches from the host.
  // Label inputs -> the class count of the loss they feed, found once so SetInput stays cheap.
  struct LabelLimit {
    int64_t classes;
    std::string consumer;
    bool padding_allowed = false;  // nn::kPaddingLabel is a label too (the masked loss).
  };
  absl::flat_hash_map<int32_t, LabelLimit> label_limits_;
  std::vector<std::string> weight_names_;  // WeightNamesOf the unfused training graph.
  TorchStateDictNames torch_names_;        // Of the user's graph, for SaveWeights.
  passes::LayoutValueMap user_values_;     // From the channels-last pass.
  // Ensemble batching: the value map and stacked leaves (its graph is dropped), each model's
  // name -> its slice, and each stacked tensor -> its models' names, in model order.
  passes::BatchedGraph ensemble_;
  absl::flat_hash_map<std::string, passes::ModelTensor> model_tensors_;
  absl::flat_hash_map<std::string, std::vector<std::string>> model_names_;
  absl::flat_hash_map<std::string, const passes::StackedLeaf*> stacked_leaves_;  // In ensemble_.
  std::vector<std::string> user_parameter_names_;  // When ensembles were batched.
  int64_t steps_ = 0;
  bool step_queued_ = false;
  // Checkpoints, verify and the report.
  std::string model_fingerprint_;  // src/api/model_fingerprint.h
  uint32_t graph_id_ = 0;  // The user graph's Graph::id(): Read refuses other graphs' values.
  util::RunningTimes step_host_us_;
  std::map<std::string, int64_t> recapture_reasons_;
  int64_t library_handle_bytes_ = -1;
  int64_t verify_runs_ = 0;
  absl::Status non_finite_stop_;  // NonFinitePolicy::kStop, once found: what every call returns.
};

}  // namespace reprise

#endif  // REPRISE_SRC_API_TRAINER_IMPL_H_
