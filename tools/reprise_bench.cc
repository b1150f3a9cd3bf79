// reprise-bench: ms per training step of a model, for each execution mode, timed with CUDA events
// after warm-up (median and p90 of many steps), with the host time of one Step() call, launches
// per step and device memory; for GPT-2 also tokens/s and MFU. Prints a table; --json writes the
// numbers; --compare_torch runs tools/bench/torch_mlp.py (or torch_resnet.py) for the same
// configuration on the same GPU and prints the ratios. The models are built in bench_models.cc.
//
//   reprise-bench --model mlp --depth 8 --width 256 --batch 32 --mode all --json out.json
//   reprise-bench --model resnet --depth 50 --batch 32 --tf32 --mode graph --fusion on
//   reprise-bench --model resnet --depth 50 --batch 32 --tf32 --layout nhwc --mode graph
//       --device_launch   (graph rows launched from the device: host us per Step() for any size)
//   reprise-bench --model gpt2 --batch 16 --seq 1024 --mode graph --fusion on   (GPT-2 124M)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "reprise/reprise.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_activity.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"
#include "tools/bench_kernel_flags.h"
#include "tools/bench_models.h"
#include "tools/bench_results.h"
#include "tools/bench_timing.h"
#include "tools/cli.h"
#include "tools/launch_reports.h"

ABSL_FLAG(std::string, model, "mlp",
          "model: mlp, resnet, ensemble (--ensemble MLPs) or gpt2 (models::BuildGpt2: GPT-2 124M "
          "unless --layers, --heads, --width or --vocab say otherwise)");
ABSL_FLAG(int, ensemble, 32, "models in the ensemble (ensemble): MLPs of --depth, --width, ...");
ABSL_FLAG(bool, batch_ensembles, true,
          "train an ensemble's identical models as one batched model (TrainOptions)");
ABSL_FLAG(int, input_features, 0, "input features (mlp, ensemble); 0 takes --width");
ABSL_FLAG(int, depth, 8, "hidden layers (mlp); 18, 34, 50, 101 or 152 (resnet)");
ABSL_FLAG(int, width, 256, "hidden width and input features (mlp); gpt2: 768 unless given");
ABSL_FLAG(int, batch, 32, "batch size (gpt2: sequences)");
ABSL_FLAG(int, seq, 1024, "gpt2: tokens per sequence (T); the position table has max(1024, T)");
ABSL_FLAG(int, layers, 12, "gpt2: transformer blocks");
ABSL_FLAG(int, heads, 12, "gpt2: attention heads (must divide the width)");
ABSL_FLAG(int, vocab, 50257, "gpt2: vocabulary");
ABSL_FLAG(int, padded_vocab, 0,
          "gpt2: the logits' columns (Gpt2Config::padded_vocab); 0 rounds --vocab up to a "
          "multiple of 128, --vocab itself pads nothing");
ABSL_FLAG(std::string, dtype, "auto",
          "compute type: f32, bf16 or fp16 (mixed precision, TrainOptions::numerics.compute_dtype);"
          " auto: bf16 for gpt2, else what --bf16 / --fp16 say (f32 without them)");
ABSL_FLAG(double, peak_tflops, 0,
          "gpt2: the GPU's peak TFLOPS for MFU; 0 takes the data sheet's dense rate for the "
          "compute type (H100, H200, A100), or prints no MFU for another GPU");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(int, image_size, 224, "image height and width (resnet)");
ABSL_FLAG(int, image_channels, 3,
          "3, or 4: MLPerf's stem, the images padded with a fourth channel of zeros (resnet)");
ABSL_FLAG(std::string, layout, "nchw", "nchw or nhwc (resnet)");
ABSL_FLAG(bool, deterministic, false, "only deterministic library algorithms");
ABSL_FLAG(std::string, channels_last, "auto",
          "auto, on or off: run an NCHW network channels-last inside (resnet)");
ABSL_FLAG(std::string, mirror, "off",
          "off, auto or a byte budget for the activation peak: recompute cheap forward values in "
          "the backward pass");
ABSL_FLAG(std::string, mode, "all",
          "sync, bulked, graph, all or none (with --profile or --verify)");
ABSL_FLAG(int, iters, 500, "timed steps per mode");
ABSL_FLAG(int, warmup, 50, "untimed steps before timing");
ABSL_FLAG(bool, tf32, false, "allow TF32 in matmuls");
ABSL_FLAG(bool, bf16, false,
          "mixed precision: compute in bfloat16 with float32 master weights (TrainOptions::"
          "compute_dtype)");
ABSL_FLAG(bool, fp16, false,
          "mixed precision: compute in float16 with float32 master weights and dynamic loss "
          "scaling (TrainOptions::numerics.compute_dtype, loss_scale)");
ABSL_FLAG(int, lanes, 0, "0 (auto), 1, 2, 3 or 4 concurrent lanes");
ABSL_FLAG(
    std::string, graph_launch, "auto",
    "graph mode: auto, host or device: who launches the captured step "
    "(TrainOptions::launch.graph_launch); rows launched from the device read graph+devlaunch");
ABSL_FLAG(std::string, fusion, "all",
          "on (every fusion, the whole-step MLP kernel included), per-layer (no whole-step "
          "kernel), off, or all three; rows say /per-layer and /unfused");
ABSL_FLAG(std::string, inputs, "host",
          "host: SetInput (pinned staging, copied to the GPU inside each step); device: the batch "
          "waits in device memory bound with BindInput (a loader that delivers on the GPU, as "
          "the peers' benchmark tensors do), copied device to device inside each step");
ABSL_FLAG(std::string, json, "", "write results to this JSON file");
ABSL_FLAG(int, verify, 0,
          "also run N steps captured and N eagerly from one state with deterministic algorithms "
          "and compare every tensor bit for bit (Trainer::Verify); exit 1 on a difference");
ABSL_FLAG(bool, busy, false,
          "also measure the GPU busy fraction with CUPTI (after the timings; once CUPTI is "
          "attached, later rows' host times in the same process grow, so time them separately)");
ABSL_FLAG(int, profile, 0,
          "print where the step's time goes: per kind of launch, and the N slowest launches "
          "(each launch timed alone, in plan order on one stream)");
ABSL_FLAG(int, timeline, 0,
          "print how the lanes overlap (the step captured on its lanes with an event after each "
          "launch, replayed): "
          "each lane's busy time, lane 0's N longest waits for other lanes, the tail after "
          "lane 0's last launch, the launches' spans per kind of kernel and the N longest");
ABSL_FLAG(bool, timeline_all, false,
          "with --timeline: also list every launch's span in the replay, in order of its start "
          "(to see what runs beside what)");
ABSL_FLAG(std::string, optimizer, "sgd",
          "sgd (momentum 0.9, lr 0.01), nesterov, adam or adamw (lr 1e-3, weight decay 0.01 but "
          "not on biases): TrainOptions::optimizer, all on the device. gpt2 unless given: "
          "nanoGPT's AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights only), "
          "with --max_grad_norm 1, --warmup_steps 100 and --schedule cosine unless given");
ABSL_FLAG(double, max_grad_norm, 0, "global gradient-norm clipping at this norm; 0: off");
ABSL_FLAG(std::string, schedule, "constant",
          "learning-rate decay after the warm-up: constant, cosine (over --total_steps) or step");
ABSL_FLAG(int, warmup_steps, 0, "linear learning-rate warm-up steps");
ABSL_FLAG(int, total_steps, 10000, "steps of the cosine schedule; step size of the step decay");
ABSL_FLAG(
    std::string, non_finite, "skip",
    "the non-finite guard (TrainOptions::numerics.non_finite): skip (the default), stop or ignore "
    "(no check, for speed runs; the whole-step MLP kernels check inside themselves otherwise)");
ABSL_FLAG(bool, compare_torch, false,
          "also run tools/bench/torch_mlp.py (python3) for this configuration and print ratios");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-bench",
    "[--model mlp|resnet|ensemble|gpt2] [--depth N] [--width N] [--batch N] [--seq N] [--mode "
    "sync|bulked|graph|all|none] [--fusion on|per-layer|off|all] [--json FILE] ...\n"
    "  ms per training step of a model for each execution mode, timed with CUDA events.\n"
    "  gpt2 also prints tokens/s and MFU: model flops per step (6*N + 6*L*T*C) * tokens, llm.c's\n"
    "  count (N parameters, the tied embedding once; L layers; T tokens per sequence; C width),\n"
    "  over the step time and the GPU's dense peak for the compute type (--peak_tflops).",
    __FILE__, reprise::tools::kBenchKernelFlagsFile};

// Every flag with a fixed set or range of values, checked before any device work.
absl::Status CheckBenchFlags() {
  namespace cli = reprise::cli;
  const std::string model = absl::GetFlag(FLAGS_model);
  for (const absl::Status& check : {
           cli::OneOf("model", FLAGS_model, {"mlp", "resnet", "ensemble", "gpt2"}),
           model == "resnet" ? cli::OneOf("depth", FLAGS_depth, {18, 34, 50, 101, 152})
                             : cli::AtLeast("depth", FLAGS_depth, 0),
           cli::AtLeast("ensemble", FLAGS_ensemble, 1),
           cli::AtLeast("input_features", FLAGS_input_features, 0),
           cli::AtLeast("width", FLAGS_width, 1),
           cli::AtLeast("batch", FLAGS_batch, 1),
           cli::AtLeast("seq", FLAGS_seq, 1),
           cli::AtLeast("layers", FLAGS_layers, 1),
           cli::AtLeast("heads", FLAGS_heads, 1),
           cli::AtLeast("vocab", FLAGS_vocab, 2),
           cli::AtLeast("padded_vocab", FLAGS_padded_vocab, 0),
           cli::OneOf("dtype", FLAGS_dtype, {"auto", "f32", "bf16", "fp16"}),
           cli::NonNegative("peak_tflops", absl::GetFlag(FLAGS_peak_tflops)),
           cli::AtLeast("classes", FLAGS_classes, 2),
           cli::AtLeast("image_size", FLAGS_image_size, 32),
           cli::OneOf("image_channels", FLAGS_image_channels, {3, 4}),
           cli::OneOf("layout", FLAGS_layout, {"nchw", "nhwc"}),
           cli::OneOf("channels_last", FLAGS_channels_last, {"auto", "on", "off"}),
           cli::OneOf("mode", FLAGS_mode, {"sync", "bulked", "graph", "all", "none"}),
           cli::AtLeast("iters", FLAGS_iters, 1),
           cli::AtLeast("warmup", FLAGS_warmup, 1),
           cli::InRange("lanes", FLAGS_lanes, 0, 4),
           cli::OneOf("graph_launch", FLAGS_graph_launch, {"auto", "host", "device"}),
           cli::OneOf("fusion", FLAGS_fusion, {"on", "per-layer", "off", "all"}),
           cli::OneOf("inputs", FLAGS_inputs, {"host", "device"}),
           cli::AtLeast("verify", FLAGS_verify, 0),
           cli::AtLeast("profile", FLAGS_profile, 0),
           cli::AtLeast("timeline", FLAGS_timeline, 0),
           cli::OneOf("optimizer", FLAGS_optimizer, {"sgd", "nesterov", "adam", "adamw"}),
           cli::NonNegative("max_grad_norm", absl::GetFlag(FLAGS_max_grad_norm)),
           cli::OneOf("schedule", FLAGS_schedule, {"constant", "cosine", "step"}),
           cli::AtLeast("warmup_steps", FLAGS_warmup_steps, 0),
           cli::AtLeast("total_steps", FLAGS_total_steps, 1),
       }) {
    RETURN_IF_ERROR(check);
  }
  RETURN_IF_ERROR(reprise::tools::KernelTuningFromFlags().status());
  if (absl::Status mirror = reprise::ParseMirrorOptions(absl::GetFlag(FLAGS_mirror)).status();
      !mirror.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mirror: ", mirror.message()));
  }
  if (absl::GetFlag(FLAGS_bf16) && absl::GetFlag(FLAGS_fp16)) {
    return absl::InvalidArgumentError("--bf16 and --fp16 exclude each other");
  }
  if (absl::GetFlag(FLAGS_dtype) != "auto" &&
      (absl::GetFlag(FLAGS_bf16) || absl::GetFlag(FLAGS_fp16))) {
    return absl::InvalidArgumentError("--dtype and --bf16 / --fp16 exclude each other");
  }
  if (model == "gpt2" && absl::GetFlag(FLAGS_compare_torch)) {
    return absl::InvalidArgumentError(
        "--compare_torch knows mlp, resnet and ensemble; GPT-2's peers are tools/bench/'s scripts");
  }
  return absl::OkStatus();
}

// The flags named on the command line (noted by main): a model's own defaults apply to the rest.
absl::flat_hash_set<std::string>& GivenFlags() {
  static auto* given = new absl::flat_hash_set<std::string>();
  return *given;
}
bool Given(absl::string_view name) { return GivenFlags().contains(name); }

using reprise::tools::BenchResult;

// --dtype, or --bf16 or --fp16 (CheckBenchFlags refuses two of them), else float32 (gpt2:
// bfloat16).
reprise::DType ComputeDType() {
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "fp16" || absl::GetFlag(FLAGS_fp16)) return reprise::DType::kFloat16;
  if (dtype == "bf16" || absl::GetFlag(FLAGS_bf16)) return reprise::DType::kBFloat16;
  if (dtype == "auto" && absl::GetFlag(FLAGS_model) == "gpt2") return reprise::DType::kBFloat16;
  return reprise::DType::kFloat32;
}

// The compute type as PeakTflops names it.
std::string Precision() {
  switch (ComputeDType()) {
    case reprise::DType::kBFloat16:
      return "bf16";
    case reprise::DType::kFloat16:
      return "fp16";
    default:
      return absl::GetFlag(FLAGS_tf32) ? "tf32" : "fp32";
  }
}

enum class Fusion { kOn, kPerLayer, kOff };
absl::string_view FusionSuffix(Fusion f) {
  return f == Fusion::kOn ? "" : f == Fusion::kPerLayer ? "/per-layer" : "/unfused";
}

absl::StatusOr<reprise::ChannelsLast> ChannelsLastFlag() {
  const std::string value = absl::GetFlag(FLAGS_channels_last);
  if (value == "auto") return reprise::ChannelsLast::kAuto;
  if (value == "on") return reprise::ChannelsLast::kOn;
  if (value == "off") return reprise::ChannelsLast::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--channels_last must be auto, on or off, not '", value, "'"));
}

// The TrainOptions every trainer of this run shares, from the flags: precision, lanes, kernels,
// layout, mirroring, ensembles, the optimizer and the non-finite guard.
absl::StatusOr<reprise::TrainOptions> OptionsFromFlags(reprise::ExecMode mode) {
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.launch.mode = mode;
  options.numerics.allow_tf32 = absl::GetFlag(FLAGS_tf32);
  options.numerics.compute_dtype = ComputeDType();
  options.launch.lanes = absl::GetFlag(FLAGS_lanes);
  options.numerics.deterministic = absl::GetFlag(FLAGS_deterministic);
  ASSIGN_OR_RETURN(options.kernels, reprise::tools::KernelTuningFromFlags());
  ASSIGN_OR_RETURN(options.kernels.channels_last, ChannelsLastFlag());
  ASSIGN_OR_RETURN(options.mirror, reprise::ParseMirrorOptions(absl::GetFlag(FLAGS_mirror)));
  options.parallel.batch_ensembles = absl::GetFlag(FLAGS_batch_ensembles);
  ASSIGN_OR_RETURN(options.numerics.non_finite.policy,
                   reprise::ParseNonFinitePolicy(absl::GetFlag(FLAGS_non_finite)));
  reprise::tools::BenchOptimizerFlags optimizer{.total_steps = absl::GetFlag(FLAGS_total_steps)};
  if (Given("optimizer")) optimizer.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (Given("schedule")) optimizer.schedule = absl::GetFlag(FLAGS_schedule);
  if (Given("max_grad_norm")) optimizer.max_grad_norm = absl::GetFlag(FLAGS_max_grad_norm);
  if (Given("warmup_steps")) optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  ASSIGN_OR_RETURN(const std::optional<reprise::OptimizerOptions> chosen,
                   reprise::tools::BenchOptimizer(absl::GetFlag(FLAGS_model), optimizer));
  if (chosen.has_value()) options.optimizer = *chosen;  // Else TrainOptions' default SGD.
  return options;
}

using reprise::tools::BenchInput;
using reprise::tools::BenchModel;

// The flags' model (tools/bench_models.h).
reprise::tools::BenchModelConfig ModelConfig() {
  return {.model = absl::GetFlag(FLAGS_model),
          .batch = absl::GetFlag(FLAGS_batch),
          .depth = absl::GetFlag(FLAGS_depth),
          .width = absl::GetFlag(FLAGS_width),
          .input_features = absl::GetFlag(FLAGS_input_features),
          .classes = absl::GetFlag(FLAGS_classes),
          .ensemble = absl::GetFlag(FLAGS_ensemble),
          .image_size = absl::GetFlag(FLAGS_image_size),
          .image_channels = absl::GetFlag(FLAGS_image_channels),
          .layout = absl::GetFlag(FLAGS_layout),
          .seq = absl::GetFlag(FLAGS_seq),
          .layers = absl::GetFlag(FLAGS_layers),
          .heads = absl::GetFlag(FLAGS_heads),
          .gpt2_width = Given("width") ? absl::GetFlag(FLAGS_width) : 768,
          .vocab = absl::GetFlag(FLAGS_vocab),
          .padded_vocab = absl::GetFlag(FLAGS_padded_vocab)};
}

// The flags' model with one random batch for each of its inputs.
absl::StatusOr<BenchModel> BuildModel() { return reprise::tools::BuildBenchModel(ModelConfig()); }

// --inputs host: copies them into the trainer's input buffers; device: binds device copies (kept
// alive by the caller), so each step's input copy is a device-to-device one.
absl::StatusOr<std::vector<reprise::runtime::DeviceBuffer>> FeedInputs(reprise::Trainer& trainer,
                                                                       const BenchModel& model) {
  return reprise::tools::FeedBenchInputs(trainer, model, absl::GetFlag(FLAGS_inputs) == "device",
                                         absl::GetFlag(FLAGS_batch_ensembles));
}

absl::StatusOr<BenchResult> Measure(reprise::ExecMode mode, Fusion fusion,
                                    const std::string& device_name) {
  ASSIGN_OR_RETURN(BenchModel model, BuildModel());
  ASSIGN_OR_RETURN(const int64_t memory_before, reprise::runtime::DeviceMemoryInUse());
  ASSIGN_OR_RETURN(reprise::TrainOptions options, OptionsFromFlags(mode));
  options.kernels.fuse = fusion != Fusion::kOff;
  options.kernels.whole_step = fusion == Fusion::kOn;
  if (mode == reprise::ExecMode::kGraph) {
    ASSIGN_OR_RETURN(options.launch.graph_launch,
                     reprise::ParseGraphLaunch(absl::GetFlag(FLAGS_graph_launch)));
    // CUPTI's kernel activity tracing and a device-launched step fault together ("unspecified
    // launch failure" in the traced steps; H200, driver 580), so the busy fraction is
    // measured on host-launched steps (their rows read "graph", not "graph+devlaunch").
    if (absl::GetFlag(FLAGS_busy)) {
      if (options.launch.graph_launch == reprise::GraphLaunch::kDevice) {
        return absl::InvalidArgumentError(
            "--busy traces kernels with CUPTI, which faults device-launched steps: use "
            "--graph_launch=auto or host");
      }
      options.launch.graph_launch = reprise::GraphLaunch::kHost;
    }
  }
  const auto conv_plans_before = reprise::runtime::CudnnConvGraph::Stats();
  const auto matmul_choices_before = reprise::ops::MatmulChoices();
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  ASSIGN_OR_RETURN(std::vector<reprise::runtime::DeviceBuffer> device_inputs,
                   FeedInputs(*trainer, model));
  // The warm-up's steps estimate the timed ones, which report progress when they run long.
  ASSIGN_OR_RETURN(const std::vector<float> warmup_ms,
                   reprise::tools::WarmUp(*trainer, absl::GetFlag(FLAGS_warmup)));
  ASSIGN_OR_RETURN(
      std::vector<float> ms,
      reprise::tools::TimeStepsShowingProgress(
          *trainer, absl::GetFlag(FLAGS_iters), reprise::tools::Percentile(warmup_ms, 0.5) / 1000,
          absl::StrCat(reprise::ExecModeName(mode), FusionSuffix(fusion))));
  // Host cost of Step() alone: each call only enqueues, timed with the device idle. Calls made
  // back to back would soon find the device's launch queue full and wait for the steps ahead of
  // them, which is device time (a ResNet-50 row once read 14 ms of "host" time per step).
  std::vector<float> host_us;
  for (int i = 0; i < std::min(absl::GetFlag(FLAGS_iters), 200); ++i) {
    RETURN_IF_ERROR(trainer->Synchronize());
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(trainer->Step());
    host_us.push_back(static_cast<float>(absl::ToDoubleMicroseconds(absl::Now() - start)));
  }
  // The same call queued behind a running step, as in a training loop whose host runs ahead:
  // the thread has not just woken from Synchronize(), whose sleep makes the next driver call slow.
  std::vector<float> host_us_queued;
  for (int i = 0; i < std::min(absl::GetFlag(FLAGS_iters), 200); ++i) {
    RETURN_IF_ERROR(trainer->Synchronize());
    RETURN_IF_ERROR(trainer->Step());
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(trainer->Step());
    host_us_queued.push_back(static_cast<float>(absl::ToDoubleMicroseconds(absl::Now() - start)));
  }
  std::vector<float> host_us_after_input;
  for (int i = 0;
       absl::GetFlag(FLAGS_inputs) == "host" && i < std::min(absl::GetFlag(FLAGS_iters), 200);
       ++i) {
    RETURN_IF_ERROR(reprise::tools::SetBenchInputs(*trainer, model));  // Waits for the step before.
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(trainer->Step());
    host_us_after_input.push_back(
        static_cast<float>(absl::ToDoubleMicroseconds(absl::Now() - start)));
  }
  RETURN_IF_ERROR(trainer->Synchronize());
  // Busy fraction: kernel and copy time CUPTI saw, merged, over the same steps' event time.
  double busy_fraction = -1;
  if (!absl::GetFlag(FLAGS_busy)) {
    // Not asked for: CUPTI would slow the host side of every later measurement.
  } else if (auto activity = reprise::runtime::KernelActivity::Start(); activity.ok()) {
    ASSIGN_OR_RETURN(std::vector<float> watched,
                     trainer->TimeSteps(std::min(absl::GetFlag(FLAGS_iters), 200)));
    ASSIGN_OR_RETURN(reprise::runtime::KernelActivity::Summary summary, (*activity)->Stop());
    double total_ms = 0;
    for (float t : watched) total_ms += t;
    if (total_ms > 0) busy_fraction = summary.busy_ms / total_ms;
  } else {
    std::fprintf(stderr, "reprise-bench: no busy fraction: %s\n",
                 activity.status().ToString().c_str());
  }
  ASSIGN_OR_RETURN(const int64_t memory_after, reprise::runtime::DeviceMemoryInUse());
  const reprise::TrainerStats stats = trainer->stats();
  BenchResult result{
      absl::StrCat(reprise::ExecModeName(mode), stats.device_graph_launch ? "+devlaunch" : "",
                   FusionSuffix(fusion)),
      reprise::tools::Percentile(ms, 0.5),
      reprise::tools::Percentile(ms, 0.9),
      reprise::tools::Percentile(host_us, 0.5),
      stats.launches_per_step,
      stats.graph_nodes,
      stats.arena_bytes,
      memory_after - memory_before,
      stats.kernel_acquire_ms,
      stats.kernels_compiled,
      stats.kernel_disk_hits,
      busy_fraction};
  result.host_us_queued = reprise::tools::Percentile(host_us_queued, 0.5);
  result.create_ms = stats.create_total_ms;
  result.create_breakdown = stats.CreateBreakdown();
  for (const std::string& measured :
       {reprise::runtime::CudnnConvGraph::Stats().MeasuredSince(conv_plans_before),
        reprise::runtime::CudnnConvGraph::Stats().TimingSince(conv_plans_before),
        reprise::ops::MatmulChoices().MeasuredSince(matmul_choices_before)}) {
    if (!measured.empty()) absl::StrAppend(&result.create_breakdown, "; ", measured);
  }
  if (stats.conv_legacy_measured + stats.conv_legacy_from_records > 0) {
    absl::StrAppendFormat(&result.create_breakdown,
                          "; cuDNN legacy conv algorithms measured %d (%.0f ms), from records %d",
                          stats.conv_legacy_measured, stats.conv_legacy_measure_ms,
                          stats.conv_legacy_from_records);
  }
  if (!host_us_after_input.empty()) {
    result.host_us_after_input = reprise::tools::Percentile(host_us_after_input, 0.5);
  }
  result.activation_peak_bytes = stats.activation_peak_bytes;
  result.activation_peak_unmirrored_bytes = stats.activation_peak_unmirrored_bytes;
  result.mirrored_nodes = stats.mirrored_nodes;
  result.path = reprise::tools::StepPath(trainer->training_graph());
  result.samples_per_step = model.samples_per_step;
  result.tokens_per_step = model.tokens_per_step;
  result.flops_per_step = model.flops_per_step;
  result.precision = Precision();
  result.peak_tflops = absl::GetFlag(FLAGS_peak_tflops) > 0
                           ? absl::GetFlag(FLAGS_peak_tflops)
                           : reprise::tools::PeakTflops(device_name, result.precision);
  return result;
}

// A bulked trainer of the flags' configuration, its inputs set: for the per-launch reports.
struct BulkedTrainer {
  BenchModel model;
  std::unique_ptr<reprise::Trainer> trainer;
  std::vector<reprise::runtime::DeviceBuffer> device_inputs;  // Bound with --inputs device.
};
absl::StatusOr<BulkedTrainer> CreateBulkedTrainer() {
  ASSIGN_OR_RETURN(BenchModel model, BuildModel());
  ASSIGN_OR_RETURN(const reprise::TrainOptions options,
                   OptionsFromFlags(reprise::ExecMode::kBulked));
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  ASSIGN_OR_RETURN(std::vector<reprise::runtime::DeviceBuffer> device_inputs,
                   FeedInputs(*trainer, model));
  return BulkedTrainer{std::move(model), std::move(trainer), std::move(device_inputs)};
}

// Each launch's median time, summed per kind of kernel, then the slowest launches.
absl::Status Profile() {
  ASSIGN_OR_RETURN(BulkedTrainer bulked, CreateBulkedTrainer());
  ASSIGN_OR_RETURN(std::vector<reprise::Trainer::LaunchTime> times,
                   bulked.trainer->ProfileLaunches(10));
  reprise::tools::PrintProfile(std::move(times), absl::GetFlag(FLAGS_profile));
  return absl::OkStatus();
}

// How the lanes overlap (tools/launch_reports.h).
absl::Status Timeline() {
  ASSIGN_OR_RETURN(BulkedTrainer bulked, CreateBulkedTrainer());
  ASSIGN_OR_RETURN(std::vector<reprise::Trainer::LaunchSpan> spans, bulked.trainer->TimeLanes(20));
  reprise::tools::PrintTimeline(spans, absl::GetFlag(FLAGS_timeline),
                                absl::GetFlag(FLAGS_timeline_all));
  return absl::OkStatus();
}

// Trainer::Verify on this configuration (graph mode, deterministic algorithms), with the report.
absl::Status VerifyModel(int steps) {
  ASSIGN_OR_RETURN(BenchModel model, BuildModel());
  ASSIGN_OR_RETURN(reprise::TrainOptions options, OptionsFromFlags(reprise::ExecMode::kGraph));
  options.numerics.deterministic = true;  // Bitwise agreement needs algorithms without atomics.
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  RETURN_IF_ERROR(reprise::tools::SetBenchInputs(*trainer, model));
  ASSIGN_OR_RETURN(const reprise::VerifyResult result, trainer->Verify(steps));
  std::printf("%s\n%s", result.ToString().c_str(), trainer->Report().ToText().c_str());
  return result.ok() ? absl::OkStatus() : absl::InternalError("verify mode found a difference");
}

const char* Json(bool b) { return b ? "true" : "false"; }

absl::Status Main() {
  std::vector<reprise::ExecMode> modes;
  if (absl::GetFlag(FLAGS_mode) == "none") {
    // Only --profile, --timeline, --verify or --compare_torch.
  } else if (absl::GetFlag(FLAGS_mode) == "all") {
    modes = {reprise::ExecMode::kSync, reprise::ExecMode::kBulked, reprise::ExecMode::kGraph};
  } else {
    ASSIGN_OR_RETURN(reprise::ExecMode m, reprise::ParseExecMode(absl::GetFlag(FLAGS_mode)));
    modes = {m};
  }
  ASSIGN_OR_RETURN(int devices, reprise::runtime::VisibleDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device visible");
  ASSIGN_OR_RETURN(reprise::runtime::DeviceInfo device, reprise::runtime::UseDevice(0));
  const reprise::tools::BenchModelConfig model = ModelConfig();
  const reprise::DType dtype = ComputeDType();
  ASSIGN_OR_RETURN(const reprise::TrainOptions train, OptionsFromFlags(reprise::ExecMode::kGraph));
  // absl::PrintF: several arguments are std::string, which printf's varargs cannot take.
  absl::PrintF(
      "reprise-bench %s channels_last=%s tf32=%d bf16=%d lanes=%d mirror=%s %s%s%s%s%s%s on %s\n",
      reprise::tools::ModelConfigText(model), absl::GetFlag(FLAGS_channels_last),
      absl::GetFlag(FLAGS_tf32), dtype == reprise::DType::kBFloat16, absl::GetFlag(FLAGS_lanes),
      absl::GetFlag(FLAGS_mirror), reprise::tools::OptimizerText(train.optimizer),
      model.model == "ensemble"
          ? absl::StrCat(" batch_ensembles=", absl::GetFlag(FLAGS_batch_ensembles))
          : "",
      dtype == reprise::DType::kFloat16 ? " fp16=1" : "", reprise::tools::KernelFlagsText(),
      absl::GetFlag(FLAGS_inputs) == "device" ? " inputs=device" : "",
      absl::GetFlag(FLAGS_graph_launch) == "auto"
          ? ""
          : absl::StrCat(" graph_launch=", absl::GetFlag(FLAGS_graph_launch)),
      device.name);
  std::printf("%s", reprise::tools::ResultHeader().c_str());
  std::vector<Fusion> fusions;
  const std::string fusion = absl::GetFlag(FLAGS_fusion);
  if (fusion == "on" || fusion == "all") fusions.push_back(Fusion::kOn);
  if (fusion == "per-layer" || fusion == "all") fusions.push_back(Fusion::kPerLayer);
  if (fusion == "off" || fusion == "all") fusions.push_back(Fusion::kOff);
  if (fusions.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fusion must be on, per-layer, off or all, not '", fusion, "'"));
  }
  std::vector<std::string> json_results;
  double graph_ms = 0;
  for (Fusion fuse : fusions) {
    for (reprise::ExecMode mode : modes) {
      std::fprintf(stderr, "reprise-bench: measuring %s%s ...\n",
                   std::string(reprise::ExecModeName(mode)).c_str(),
                   std::string(FusionSuffix(fuse)).c_str());
      ASSIGN_OR_RETURN(const BenchResult r, Measure(mode, fuse, device.name));
      std::printf("%s", reprise::tools::ResultText(r).c_str());
      std::fprintf(stderr,
                   "reprise-bench: %s kernels acquired in %.1f ms (%lld compiled, %lld from "
                   "disk); %s\n",
                   r.mode.c_str(), r.kernel_acquire_ms, static_cast<long long>(r.kernels_compiled),
                   static_cast<long long>(r.kernel_disk_hits), r.create_breakdown.c_str());
      if (r.mode == "graph" || r.mode == "graph+devlaunch") graph_ms = r.median_ms;
      json_results.push_back(reprise::tools::ResultJson(r));
    }
  }
  if (absl::GetFlag(FLAGS_profile) > 0) RETURN_IF_ERROR(Profile());
  if (absl::GetFlag(FLAGS_timeline) > 0) RETURN_IF_ERROR(Timeline());
  if (absl::GetFlag(FLAGS_verify) > 0) RETURN_IF_ERROR(VerifyModel(absl::GetFlag(FLAGS_verify)));
  if (absl::GetFlag(FLAGS_compare_torch)) {
    RETURN_IF_ERROR(reprise::tools::CompareWithTorch(
        ModelConfig(), Precision(), absl::GetFlag(FLAGS_tf32), absl::GetFlag(FLAGS_iters),
        absl::GetFlag(FLAGS_warmup), graph_ms));
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << absl::StrFormat(
        "{\"tool\": \"reprise-bench\", \"gpu\": \"%s\", \"date\": \"%s\", \"config\": {%s, "
        "\"channels_last\": \"%s\", \"tf32\": %s, \"bf16\": %s, \"fp16\": %s, \"lanes\": %d, "
        "\"mirror\": \"%s\", \"inputs\": \"%s\", \"iters\": %d, \"warmup\": %d%s}, "
        "\"results\": {%s}}\n",
        device.name, absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()),
        reprise::tools::ModelConfigJson(model), absl::GetFlag(FLAGS_channels_last),
        Json(absl::GetFlag(FLAGS_tf32)), Json(dtype == reprise::DType::kBFloat16),
        Json(dtype == reprise::DType::kFloat16), absl::GetFlag(FLAGS_lanes),
        absl::GetFlag(FLAGS_mirror), absl::GetFlag(FLAGS_inputs), absl::GetFlag(FLAGS_iters),
        absl::GetFlag(FLAGS_warmup),
        model.model != "ensemble"
            ? ""
            : absl::StrCat(", \"batch_ensembles\": ", Json(absl::GetFlag(FLAGS_batch_ensembles))),
        absl::StrJoin(json_results, ", "));
    if (!out) return absl::UnavailableError(absl::StrCat("could not write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc && absl::string_view(argv[i]) != "--"; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--") || absl::ConsumePrefix(&arg, "-")) {
      GivenFlags().insert(std::string(arg.substr(0, arg.find('='))));
    }
  }
  reprise::cli::ParseCommandLine(argc, argv, kProgram);
  reprise::cli::CheckFlags(kProgram, {CheckBenchFlags()});
  return reprise::cli::Finish(kProgram, Main());
}
