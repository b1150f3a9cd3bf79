// Trainer: compiles a graph's training step (forward, backward, optimizer update) into one plan
// and runs it on a GPU, either op by op (sync, bulked) or as one replayed CUDA graph.
//
//   ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(mlp.graph, mlp.loss, {}));
//   for (...) {
//     RETURN_IF_ERROR(trainer->SetInput("features", batch));
//     RETURN_IF_ERROR(trainer->SetInput("labels", labels));
//     RETURN_IF_ERROR(trainer->Step());
//   }
//   ASSIGN_OR_RETURN(float loss, trainer->Loss());
#ifndef REPRISE_INCLUDE_REPRISE_TRAINER_H_
#define REPRISE_INCLUDE_REPRISE_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/data_parallel.h"
#include "reprise/graph.h"
#include "reprise/kernel_tuning.h"
#include "reprise/mirror_options.h"
#include "reprise/non_finite.h"
#include "reprise/optimizer.h"
#include "reprise/progress.h"

namespace reprise {

class ForwardRunner;    // reprise/forward_runner.h
struct ForwardOptions;  // reprise/forward_runner.h

// How a step runs. All three run the same plan.
enum class ExecMode : uint8_t {
  kSync,    // Launch op by op, synchronising after each: the unbulked baseline.
  kBulked,  // Launch op by op with no synchronisation inside the step.
  kGraph,   // Capture the step once into a CUDA graph; each Step() is one replay.
};
absl::string_view ExecModeName(ExecMode mode);
absl::StatusOr<ExecMode> ParseExecMode(absl::string_view name);  // "sync", "bulked", "graph"

// Who launches a captured step (TrainOptions::launch.graph_launch).
enum class GraphLaunch : uint8_t { kAuto, kHost, kDevice };
absl::string_view GraphLaunchName(GraphLaunch launch);
absl::StatusOr<GraphLaunch> ParseGraphLaunch(absl::string_view name);  // "auto", "host", "device"

// TrainOptions is grouped by concern, one struct per job, so that what a user sets reads as what
// it is for: `optimizer` (how parameters move), `numerics` (what the step computes in and how
// its numbers are checked and repeated), `mirror` (memory: what the backward pass recomputes),
// `parallel` (more than one model or rank per step), `launch` (how the plan's launches are
// issued), `kernels` (which kernels run the same step: tuning whose defaults a user never needs
// to touch). The optimizer and numerics decide what a step computes; the other groups decide how
// it runs, and change results at most by the order of floating-point operations.

// The numbers a step computes in, how they are checked, and whether they repeat bit for bit.
// TrainOptions::numerics.
struct NumericsOptions {
  // kFloat32, or kBFloat16 or kFloat16 for mixed precision: the forward and backward compute in 16
  // bits while parameters, optimizer state, batch-norm statistics and the loss stay float32
  // (src/passes/mixed_precision.h). An op without a 16-bit GPU lowering is refused at Create,
  // naming the node. float16's narrow range needs loss scaling, on by default for it (loss_scale).
  DType compute_dtype = DType::kFloat32;
  bool allow_tf32 = false;  // Let matmuls and convolutions use TF32 tensor cores.
  // Loss scaling (reprise/optimizer.h): kAuto is dynamic for float16 and off otherwise; bfloat16
  // and float32 may ask for it too. LossScale() and SkippedSteps() read its state.
  LossScaleOptions loss_scale;
  // One finiteness check of the loss and every gradient per step, on the device inside the step:
  // kSkipStep (default) skips a non-finite step's update and counts it (SkippedSteps, Report),
  // kStop also stops the trainer with a Status naming the step and the first non-finite tensor,
  // kIgnore checks nothing. With loss scaling, the scaler's check is the guard. Every plan is
  // guarded, the whole-step MLP kernels (kernels.whole_step) too: they check inside the kernel, at
  // one grid barrier before their updates (their cluster schedules, which cannot wait, are not
  // used).
  NonFiniteOptions non_finite;
  // Choose only library algorithms that give the same bits on every run (cuDNN weight gradients
  // without atomics), so that sync, bulked and graph steps agree bit for bit. Slower.
  bool deterministic = false;
};

// More than one model, or more than one GPU, per step. TrainOptions::parallel.
struct ParallelOptions {
  // Data parallelism (reprise/data_parallel.h): this trainer is one rank of a job whose ranks
  // average their gradients with NCCL inside the captured step. Every rank must be created at
  // about the same time (creation waits for all), with the same graph and options but its own
  // `device`, and call Step() (and Verify, SetParameter, LoadWeights, RestoreCheckpoint) alike.
  // Parameters start as rank 0's. Turns off the whole-step MLP kernel (kernels.whole_step).
  std::optional<DataParallel> data_parallel;
  // Ensembles: structurally identical models of one graph (same ops and shapes, their own inputs
  // and weights, e.g. models::BuildMlpEnsemble or models built one by one) train as one batched
  // model, one strided-batched GEMM per layer for all of them (src/passes/batch_ensemble.h).
  // Per-model names stay valid: SetInput("m3.features"), GetParameter("m3.fc1.weight"),
  // SaveWeights/LoadWeights write and read each model's tensors under its own names, and Read()
  // of a model's fetched value gives that model's slice. Per model, results are those of the
  // unbatched step up to the order of the total's sum. Groups of fewer than
  // ensemble_min_models models stay unbatched, and so do all with a 16-bit compute_dtype (the
  // batched ops lower float32 only).
  bool batch_ensembles = true;
  int ensemble_min_models = 2;
};

// How the plan's launches are issued: op by op or replayed, from the host or the device, on how
// many concurrent lanes. All of them run the same plan. TrainOptions::launch.
struct LaunchOptions {
  ExecMode mode = ExecMode::kGraph;
  // ExecMode::kGraph: who launches the captured step on each Step().
  //   kDevice: the device. The step's graph is instantiated for device launch and a one-node
  //     graph whose kernel tail-launches it is what Step() launches, so Step()'s host time stays
  //     that of a one-node launch whatever the model (a plain replay costs ~0.15 us of host time
  //     per graph node on an H100: 96 us for ResNet-50). Same kernels, same bits. The step still
  //     completes before the stream's next work (the next step, Loss(), Read()). Every change of
  //     the executable graph (BindInput's node update, a re-capture) is uploaded to the device
  //     again, counted in TrainerStats::graph_uploads. A step whose graph the device cannot
  //     launch (a host or event node, a copy from pageable host memory) fails Create with
  //     FailedPrecondition naming the node.
  //   kHost: cudaGraphLaunch from the host.
  //   kAuto: where the device can launch the step's graph and it has at least 64 nodes, the first
  //     18 steps launch it from both, timed as they run (no wait), and the launch of less time a
  //     step is kept (capture/launch_trial.h); below 64 nodes kHost (the host launch costs a few
  //     us, less than the launcher's kernel costs the device); kHost from then on where a binding
  //     the device cannot copy from turns up, with parallel.data_parallel and in a
  //     BucketedTrainer's buckets (a device-launched graph holds device memory per bucket).
  //     TrainerStats says which, why and what was measured, and the report prints it.
  // kDevice is InvalidArgument in the eager modes; kAuto is kHost there (nothing is captured).
  // Launched from the device, steps fault under CUPTI kernel activity tracing (seen with
  // reprise-bench --busy): profile those with kHost.
  GraphLaunch graph_launch = GraphLaunch::kAuto;
  // Concurrent lanes: 1 runs the step in order; 2 runs weight gradients and optimizer updates on a
  // second lane beside the data-gradient chain (fork/join branches of the captured graph); 3 or 4
  // also put side branches off the critical path (a residual block's downsample convolution and
  // its gradient) on lanes of their own; 0 (auto) picks 2 when the model has weight gradients.
  int lanes = 0;
};

struct TrainOptions {
  // SGD with momentum by default (learning rate 0.01, momentum 0.9: PyTorch's torch.optim.SGD);
  // SGD with Nesterov, Adam or AdamW, with gradient clipping and a learning-rate schedule, all
  // computed on the device (reprise/optimizer.h).
  OptimizerOptions optimizer;
  NumericsOptions numerics;
  // Memory: kOff until mirrored steps have passed their GPU tests; see MirrorOptions.
  MirrorOptions mirror;
  ParallelOptions parallel;
  LaunchOptions launch;
  KernelTuning kernels;
  int device = 0;            // CUDA device ordinal.
  uint64_t seed = 0;         // Seeds the parameter initialisers.
  std::vector<Value> fetch;  // Values of the user graph to keep readable through Read().
  // Kernel compilation progress during Create (reprise/progress.h); empty: no reports.
  CompileProgressCallback on_compile_progress;
};

// Counters that make the engine's behaviour visible: nothing it does is silent.
struct TrainerStats {
  int64_t steps = 0;
  int64_t graph_replays = 0;
  int64_t graph_captures = 0;
  int64_t graph_instantiations = 0;
  int64_t graph_exec_updates = 0;  // Re-captures applied in place by cudaGraphExecUpdate.
  int64_t graph_node_updates = 0;  // Bindings patched into the executable graph's copy nodes.
  int64_t graph_nodes = 0;         // Nodes in the captured CUDA graph (0 before capture).
  // Device-launched steps (TrainOptions::launch.graph_launch): uploads of the step's executable
  // graph to the device (one per instantiation, exec update and node update); 0 otherwise.
  int64_t graph_uploads = 0;
  // Whether Step() launches the captured step from the device (TrainOptions::launch.graph_launch),
  // and under kAuto why the host launches it where it does.
  bool device_graph_launch = false;
  std::string host_launch_reason;
  // kAuto: whether the first steps still time both launches, and what they found (both times).
  bool graph_launch_measuring = false;
  std::string graph_launch_measurement;
  int64_t launches_per_step = 0;  // Launches in the plan, the input copy included.
  int64_t lanes = 1;
  int64_t arena_bytes = 0;  // One device allocation holds every tensor.
  int64_t parameter_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  // The parameters' 16-bit copies that the update keeps between steps in mixed precision
  // (KernelTuning::update_writes_parameter_copies); 0 otherwise.
  int64_t parameter_copy_bytes = 0;
  int64_t activation_peak_bytes = 0;             // Peak of the liveness-planned transient region.
  int64_t activation_peak_unmirrored_bytes = 0;  // The same peak planned without mirroring.
  // Forward values the backward pass reads that no mirroring policy recomputes (convolution and
  // matmul outputs...): no policy's activation peak is lower.
  int64_t mirror_floor_bytes = 0;
  int64_t mirrored_nodes = 0;  // Forward nodes recomputed in the backward pass.
  int64_t workspace_bytes = 0;
  // Each lane's tickets (words kernels count their blocks' arrivals on), over all lanes.
  int64_t lane_ticket_bytes = 0;
  double kernel_acquire_ms = 0;  // Create's wall time for kernels and cuBLASLt plans.
  // Create's wall time by phase, in the order they ran, in milliseconds: the step's compile
  // passes, the device and its library handles, the arena, the initial values (drawn on the CPU,
  // then uploaded), kernel acquisition, lowering (cuBLASLt heuristics, cuDNN plans), capture and
  // instantiation, ... The phases follow one another, so they add up to create_total_ms.
  std::vector<std::pair<std::string, double>> create_ms;
  double create_total_ms = 0;
  // create_ms on one line, largest phase first: "Create 1512 ms: initial values (CPU) 620,
  // compile passes 210, ..." (phases under 0.5 ms left out).
  std::string CreateBreakdown() const;
  int64_t kernels_compiled = 0;      // NVRTC compiles (cold kernels).
  int64_t kernel_cache_hits = 0;     // Requests answered by the in-process function table.
  double kernel_compile_ms = 0;      // Summed over compiles, which run in parallel.
  int64_t kernel_disk_hits = 0;      // Kernels loaded from the on-disk cache instead of compiled.
  int64_t kernel_cache_corrupt = 0;  // Bad on-disk entries deleted and compiled again.
  // Convolution plans of cuDNN's graph API (KernelTuning::conv_api = kGraph) this trainer's
  // Create built (not those the process had built already): from the heuristics' first choice,
  // chosen by timing candidates (measure_conv_algorithms), or rebuilt from a measured record in
  // the kernel cache; records that did not decode or no longer built (measured again and
  // replaced); the candidates timed and the wall time of building and timing them.
  int64_t conv_plans_heuristic = 0;
  int64_t conv_plans_measured = 0;
  int64_t conv_plans_from_records = 0;
  int64_t conv_plan_records_discarded = 0;
  int64_t conv_candidates_timed = 0;
  double conv_measure_ms = 0;
  // Where the rest of those plans' wall time went, for a Create's budget: their graphs validated
  // and lowered and their candidates listed; the chosen plans built (where cuDNN compiles a
  // runtime-fused engine); their first runs, captured and discarded ahead of the step's capture.
  double conv_plan_lower_ms = 0;
  double conv_plan_build_ms = 0;
  double conv_plan_warm_up_ms = 0;
  // Convolutions left to cuDNN's legacy calls (the in-place data-gradient sums, or conv_api =
  // kLegacy) whose algorithm this Create chose with measure_conv_algorithms: timed by
  // cudnnFind*AlgorithmEx, or taken from a record of an earlier measurement in the kernel cache;
  // records that did not decode or no longer apply (measured again and replaced); the wall time of
  // the searches.
  int64_t conv_legacy_measured = 0;
  int64_t conv_legacy_from_records = 0;
  int64_t conv_legacy_records_discarded = 0;
  double conv_legacy_measure_ms = 0;
  // cuBLASLt products whose algorithm this trainer's Create chose by measurement
  // (KernelTuning::measure_matmul_algorithms): timed (each distinct product once per process), or
  // named by a record of an earlier measurement in the kernel cache; records that did not decode
  // or name a configuration cuBLASLt accepts (measured again and replaced); the candidates timed
  // and the wall time of timing them.
  int64_t matmul_choices_measured = 0;
  int64_t matmul_choices_from_records = 0;
  int64_t matmul_records_discarded = 0;
  int64_t matmul_candidates_timed = 0;
  double matmul_measure_ms = 0;
  // The rest of the memory plan: gradients with an arena buffer of their own (transient, so
  // inside the activation peak), inputs, constants and kept values.
  int64_t gradient_bytes = 0;
  int64_t input_bytes = 0;
  int64_t constant_bytes = 0;
  int64_t fetched_bytes = 0;
  // Device memory taken by creating the cuBLASLt and cuDNN handles (the device's used memory
  // before and after, so another process allocating meanwhile would count); -1: not measured.
  int64_t library_handle_bytes = -1;
  // Host time of Step() (queueing the step, not running it): mean over every step, median over
  // the last 1024.
  double host_step_us_mean = 0;
  double host_step_us_median = 0;
  int64_t verify_runs = 0;  // Trainer::Verify calls; their own graphs are not counted above.
  // The non-finite guard (TrainOptions::numerics.non_finite): its policy ("skip", "stop", "ignore")
  // and the steps whose update it (or loss scaling) skipped for a non-finite loss or gradient. The
  // count lives on the device: stats() reads nothing there and leaves -1; Report() reads it.
  std::string non_finite_policy;
  int64_t skipped_steps = -1;
  // Why the whole-step MLP kernel (TrainOptions::kernels.whole_step) was not used, when it was
  // tried.
  std::string whole_step_declined;
  std::string ToString() const;
};

// Trainer::Report(): everything the engine did, and why, in one place. Text for people, JSON for
// scripts; REPRISE_REPORT=1 in the environment prints the text when a Trainer is destroyed.
struct TrainerReport {
  TrainerStats stats;
  // The step's captured CUDA graph (none in the eager modes): its nodes by CUDA's kind
  // ("kernel", "memcpy", "memset", "event_record", "wait_event", "graph" for a child graph, ...).
  struct CapturedGraph {
    std::string name;
    std::vector<std::pair<std::string, int64_t>> nodes_by_kind;
    int64_t replays = 0;
  };
  std::vector<CapturedGraph> graphs;
  // Why the step was captured again (an input bound or unbound) and why the executable graph was
  // instantiated again instead of updated in place (CUDA's cudaGraphExecUpdate result), counted.
  std::vector<std::pair<std::string, int64_t>> recapture_reasons;
  std::vector<std::pair<std::string, int64_t>> instantiation_reasons;
  // The bytes backing each compute lane's workspace (stats.workspace_bytes in all): what the
  // algorithms chosen for the lane's launches use.
  std::vector<int64_t> workspace_per_lane;
  // Loss scaling's state when the report was made (read from the device after the queued steps);
  // none when loss scaling is off.
  struct LossScaleState {
    std::string mode;  // "static" or "dynamic".
    float scale = 1;
    int64_t growth_tracker = 0;  // Clean steps since the scale last changed.
    int64_t skipped_steps = 0;
  };
  std::optional<LossScaleState> loss_scale;
  // The non-finite guard's state when the report was made (read from the device after the queued
  // steps); none with NonFinitePolicy::kIgnore and no loss scaling.
  struct NonFiniteState {
    std::string policy;  // "skip" or "stop" ("ignore" when only loss scaling checks).
    // Who skips: "the guard's check of the loss and gradients" or "loss scaling's check (an
    // overflow backs the scale off)".
    std::string checked_by;
    int64_t skipped_steps = 0;
    int64_t steps_checked = -1;          // The guard's own count of steps; -1 under loss scaling.
    int64_t first_non_finite_step = -1;  // Its index (from 0); -1: none, or under loss scaling.
    std::string stop;                    // kStop, once stopped: the Status the trainer returns.
  };
  std::optional<NonFiniteState> non_finite;

  std::string ToText() const;
  std::string ToJson() const;
};

// The first difference Trainer::Verify found between the captured and the eager run.
struct VerifyMismatch {
  int step = 0;        // Steps are counted from 0, the first step of each run.
  std::string tensor;  // "fc0.weight", "fc0.weight.exp_avg", "loss", ...
  // "loss", "gradient" (tensor "<parameter>.grad"), "parameter", "optimizer state" or "state".
  std::string kind;
  std::string node;     // The node that produced it (for parameters and state: wrote it in place).
  std::string op;       // That node's op.
  int64_t element = 0;  // Row-major index of the first element that differs.
  std::string graph_value, eager_value;  // Exactly: the value and its bits.
  std::string ToString() const;
};

struct VerifyResult {
  int steps = 0;  // Steps each run took: fewer than asked when a difference ended them.
  int64_t tensors_compared = 0;  // Per step: the loss, gradients, parameters, state.
  // Gradients that fusion keeps inside a kernel (no buffer to read): they are checked through
  // what the optimizer wrote from them.
  std::vector<std::string> gradients_not_materialized;
  std::optional<VerifyMismatch> mismatch;
  bool ok() const { return !mismatch.has_value(); }
  std::string ToString() const;
};

// How Trainer::LoadWeights matches a file's tensors to the graph's.
struct LoadWeightsOptions {
  // Leave a graph tensor the file lacks as it is, instead of failing.
  bool allow_missing = false;
  // Ignore a file tensor the graph does not have, as PyTorch state dicts carry
  // "<layer>.num_batches_tracked"; false makes it an error.
  bool allow_unexpected = true;
};

// What Trainer::SaveWeights writes.
struct SaveWeightsOptions {
  // A PyTorch state dict: the model's parameters and buffers only, so that a torch module built
  // with the same layer names loads the file with load_state_dict(strict=True).
  bool torch_compatible = false;
};

class Trainer {
 public:
  // Builds the training step for `loss` (a scalar of `graph`) and prepares it to run: autodiff,
  // passes, memory plan, kernels compiled, cuBLASLt plans chosen. Nothing is compiled, allocated
  // or chosen later. FailedPrecondition without a usable GPU.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const Graph& graph, Value loss,
                                                         const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Binds the next step's value of an input (float32 or int32 by the input's dtype). The data is
  // copied; the caller's buffer may be reused at once. NotFound for an unknown name,
  // InvalidArgument for a wrong dtype, a wrong size, a label outside [0, classes) (the masked loss
  // also takes nn::kPaddingLabel), or an optimizer input ("learning_rate", "momentum", ...) that
  // is NaN, infinite or out of its range.
  absl::Status SetInput(absl::string_view name, absl::Span<const float> data);
  absl::Status SetInput(absl::string_view name, absl::Span<const int32_t> data);
  // Binds the next steps' base learning rate; a schedule (OptimizerOptions::schedule) multiplies
  // it on the device. Same errors as SetInput: NaN, infinities and negative rates are refused.
  absl::Status SetLearningRate(float learning_rate);

  // Zero-copy input: the engine's own pinned host buffer for input `name`, which the next Step()
  // copies to the device; write the batch straight into it. Waits until no queued step still
  // reads it. Valid for the Trainer's life. NotFound / InvalidArgument (wrong dtype) as SetInput;
  // no label range check is made on data written this way.
  absl::StatusOr<absl::Span<float>> InputBuffer(absl::string_view name);
  absl::StatusOr<absl::Span<int32_t>> InputBufferInt32(absl::string_view name);

  // Binds input `name` to memory the caller owns: from now on each Step() copies the input from
  // `data` (device memory of this Trainer's GPU, or pinned host memory; `bytes` must be the
  // input's size), read when the step runs. The caller keeps it valid and unchanged until the
  // step is done. Rebinding to another pointer patches the captured graph in place; the first
  // binding of an input (and unbinding, with nullptr) re-captures, counted in stats().
  // InvalidArgument for a wrong size or pageable host memory, NotFound for an unknown name. Labels
  // read this way are not range-checked (the data is read on the device).
  absl::Status BindInput(absl::string_view name, const void* data, size_t bytes);

  // Runs one training step. Asynchronous: it returns once the step is queued. Under
  // NonFinitePolicy::kStop, once a call that waits has found a non-finite step, FailedPrecondition
  // naming it (as every later call).
  absl::Status Step();
  // Loss scaling's current scale (TrainOptions::numerics.loss_scale), and the steps whose update
  // was skipped for a non-finite loss or gradient (by loss scaling, or else the non-finite guard,
  // TrainOptions::numerics.non_finite), read from the device after the queued steps: a read on
  // request, nothing the steps wait for. 1 when loss scaling is off; 0 skipped with neither.
  absl::StatusOr<float> LossScale();
  absl::StatusOr<int64_t> SkippedSteps();
  // Waits for the queued steps to finish.
  absl::Status Synchronize();
  // Runs `steps` steps with the bound inputs, each between two CUDA events; returns each step's
  // device time in ms. For benchmarks: no host work runs between the steps.
  absl::StatusOr<std::vector<float>> TimeSteps(int steps);

  // Where a step's device time goes: every launch of the plan run in order on one stream between
  // CUDA events, `repeats` times, reduced to the median per launch (lanes do not overlap here).
  struct LaunchTime {
    std::string node;    // The plan's node (a fused kernel is named for its first node).
    std::string kernel;  // What runs: "cudnn conv fwd algo 1 ...", "nvrtc reprise_relu ...".
    int lane = 0;
    float median_ms = 0;
  };
  absl::StatusOr<std::vector<LaunchTime>> ProfileLaunches(int repeats);
  // How the lanes overlap: the step captured on its lanes (the fork/join graph Step() replays)
  // with an event-record node after every launch, replayed `repeats` times. Per launch, in ms
  // after the step began (medians): when its lane and the launches it waits for let it start, and
  // when it ended. The event nodes add a little time between launches. Like ProfileLaunches,
  // every run is a training step: the parameters move (with data parallelism, every rank calls it
  // alike, as Step()). Any mode; the timed graph is its own (the step's graph and its counters
  // are untouched).
  struct LaunchSpan {
    std::string node;
    std::string kernel;
    int lane = 0;
    std::vector<int> waits;  // Launches (indices into the result) on other lanes it waits for.
    float start_ms = 0;
    float end_ms = 0;
  };
  absl::StatusOr<std::vector<LaunchSpan>> TimeLanes(int repeats);

  // The loss of the last step (waits for it).
  absl::StatusOr<float> Loss();
  // A value named in TrainOptions::fetch, as computed by the last step, in the layout the graph
  // declares (also when the step runs channels-last inside).
  absl::StatusOr<std::vector<float>> Read(Value value);

  std::vector<std::string> ParameterNames() const;
  absl::StatusOr<std::vector<float>> GetParameter(absl::string_view name);
  absl::Status SetParameter(absl::string_view name, absl::Span<const float> data);

  // Writes the weights to a safetensors file (8-byte header length, JSON header, raw
  // little-endian data), which PyTorch reads with safetensors.torch.load_file: every parameter,
  // every optimizer state tensor and every other state tensor, under its graph name as is:
  //   "<layer>.weight", "<layer>.bias"  parameters, in their graph shapes (a Linear's weight is
  //                                     [out, in], as torch.nn.Linear's), so a model built with
  //                                     PyTorch's layer names matches its module's state dict;
  //   "<param>.momentum"                SGD's velocity, PyTorch's optimizer.state[p]
  //                                     ["momentum_buffer"] (the same update: dampening 0);
  //   "<param>.exp_avg", "<param>.exp_avg_sq"  Adam's and AdamW's moments, as PyTorch names them;
  //   "<layer>.running_mean", ...       batch-norm statistics and other state, such as the random
  //                                     ops' step counter "rng.step" (I32[2]), which is also
  //                                     the step Adam's bias correction and the learning-rate
  //                                     schedule read.
  // f32, f64 and i32 tensors are stored as F32, F64 and I32; the metadata is {"format": "pt"}.
  // Inputs and constants are not weights and are not written; nor is state a fused kernel keeps
  // for itself. With options.torch_compatible the file holds what torch's module.state_dict()
  // holds instead: the parameters and the graph's own state (batch-norm running statistics),
  // no optimizer state and no "rng.step", and an I64 scalar "<layer>.num_batches_tracked" (the
  // step count) per batch norm. Waits for the queued steps. The file is written to a temporary
  // file beside `path` and renamed into place, so a reader never sees a part of it. Only a
  // regular file is replaced: InvalidArgument naming the path when it is a directory, device,
  // pipe or socket; a symbolic link is written through (its target replaced the same way, the
  // link kept), a dangling one refused. Internal when writing fails.
  using SaveWeightsOptions = ::reprise::SaveWeightsOptions;  // Either spelling names it.
  absl::Status SaveWeights(const std::string& path, const SaveWeightsOptions& options = {});
  // Reads tensors by name from a safetensors file into the parameters and state (see
  // SaveWeights for the names), after the queued steps. The captured step stays valid: the
  // weights are written in place, where its kernels already read them. Every tensor is checked
  // before any is written, so a refused file changes nothing. InvalidArgument, naming the tensor
  // and both specs, when a dtype or shape differs (F64 or BF16 data for an F32 tensor is refused,
  // not converted); InvalidArgument naming them for graph tensors the file lacks (unless
  // allow_missing) and file tensors the graph lacks (if not allow_unexpected). NotFound, DataLoss
  // or InvalidArgument, naming the file, when it is missing, truncated or malformed, or not a
  // regular file (a named pipe is refused at once, never waited on).
  using LoadWeightsOptions = ::reprise::LoadWeightsOptions;  // Either spelling names it.
  absl::Status LoadWeights(const std::string& path, const LoadWeightsOptions& options = {});

  // Saves the whole training state to `path`: every parameter, optimizer state and other state
  // tensor (batch-norm statistics; the device step counter "rng.step", which is the random ops'
  // offset, Adam's bias correction and the schedule's step), the optimizer's scalar inputs (the
  // base learning rate, betas, ...) as "reprise.input.<name>", and a header with the step count
  // and the model's fingerprint (src/api/checkpoint_format.h). The random seed is an attribute of
  // the graph, so the fingerprint covers it. Loss scaling's scale and counters are state tensors
  // ("loss_scale", "loss_scale.growth_tracker", "loss_scale.skipped_steps"), saved likewise. Waits
  // for the queued steps; written to a temporary file renamed into place, onto a regular file or
  // through a symbolic link as SaveWeights. Internal when writing fails.
  absl::Status SaveCheckpoint(const std::string& path);
  // Restores what SaveCheckpoint saved, so that the next steps are bit for bit those the saving
  // trainer would have run. The file is read and checked whole before anything is written, so a
  // refused file changes nothing: NotFound for no file; DataLoss for a truncated or corrupt one
  // (checksum); InvalidArgument for a file that is no checkpoint or whose tensors differ in name,
  // dtype or shape (named), or for a path that is not a regular file; FailedPrecondition for the
  // checkpoint of another model. An input bound with BindInput keeps reading the caller's memory.
  absl::Status RestoreCheckpoint(const std::string& path);

  // Runs `steps` steps twice from one snapshot of the whole state, once captured as a CUDA graph
  // and once eagerly (bulked), both from this plan with the inputs bound now, and compares after
  // every step the loss, every gradient, parameter, optimizer state and state tensor bit for bit.
  // A difference is a result (VerifyResult::mismatch), not an error. The trainer is left as it
  // was: state, step count and inputs restored, nothing captured for it changed. Needs device
  // memory for two more copies of the arena; ResourceExhausted otherwise. Bitwise agreement needs
  // deterministic library algorithms: set TrainOptions::numerics.deterministic for convolutional
  // models.
  absl::StatusOr<VerifyResult> Verify(int steps);

  // Compiles `graph`, a forward-only graph (no loss needed) whose parameters all are this
  // trainer's, to run on this trainer's GPU with its current parameters read in place, and its
  // `outputs` readable after each run: evaluation, decoding (reprise/forward_runner.h). The
  // runner may outlive the trainer. InvalidArgument naming the parameter for a parameter the
  // trainer lacks or has with another shape or dtype, and for no outputs; the pipeline's errors
  // name the node. Defined in src/api/forward_runner.cc.
  absl::StatusOr<std::unique_ptr<ForwardRunner>> CompileForward(const Graph& graph,
                                                                absl::Span<const Value> outputs);
  absl::StatusOr<std::unique_ptr<ForwardRunner>> CompileForward(const Graph& graph,
                                                                absl::Span<const Value> outputs,
                                                                const ForwardOptions& options);

  const TrainOptions& options() const;  // As given to Create.
  TrainerStats stats() const;
  TrainerReport Report() const;
  // The graph the step runs: the user's forward, its backward and the optimizer.
  const Graph& training_graph() const;

  class Impl;

 private:
  friend class BucketedTrainer;  // Builds one Trainer per bucket on one arena.
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_TRAINER_H_
