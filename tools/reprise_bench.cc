// reprise-bench: ms per training step of a model, for each execution mode, timed with CUDA events
// after warm-up (median and p90 of many steps), with the host time of one Step() call, launches
// per step and device memory. Prints a table; --json writes the numbers; --compare_torch runs
// tools/bench/torch_mlp.py (or torch_resnet.py) for the same configuration on the same GPU and
// prints the ratios.
//
//   reprise-bench --model mlp --depth 8 --width 256 --batch 32 --mode all --json out.json
//   reprise-bench --model resnet --depth 50 --batch 32 --tf32 --mode graph --fusion on
//   reprise-bench --model resnet --depth 50 --batch 64 --mode graph --fusion on --mirror auto
//   reprise-bench --model mlp --mode graph --fusion per-layer --optimizer adamw --max_grad_norm 1
//       --warmup_steps 100 --schedule cosine   (host us per Step() with the whole update on device)
//   reprise-bench --model resnet --depth 50 --batch 32 --tf32 --layout nhwc --mode graph
//       --device_launch   (graph rows launched from the device: host us per Step() for any size)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_activity.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"
#include "tools/launch_reports.h"

ABSL_FLAG(std::string, model, "mlp", "model: mlp, resnet or ensemble (--ensemble MLPs)");
ABSL_FLAG(int, ensemble, 32, "models in the ensemble (ensemble): MLPs of --depth, --width, ...");
ABSL_FLAG(bool, batch_ensembles, true,
          "train an ensemble's identical models as one batched model (TrainOptions)");
ABSL_FLAG(int, ensemble_whole_step_max_models, -1,
          "TrainOptions::kernels.ensemble_whole_step_max_models (0: the batched per-layer step at "
          "any K); -1 keeps its default");
ABSL_FLAG(int, input_features, 0, "input features (mlp, ensemble); 0 takes --width");
ABSL_FLAG(int, depth, 8, "hidden layers (mlp); 18, 34, 50, 101 or 152 (resnet)");
ABSL_FLAG(int, width, 256, "hidden width and input features (mlp)");
ABSL_FLAG(int, batch, 32, "batch size");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(int, image_size, 224, "image height and width (resnet)");
ABSL_FLAG(std::string, layout, "nchw", "nchw or nhwc (resnet)");
ABSL_FLAG(bool, deterministic, false, "only deterministic library algorithms");
ABSL_FLAG(std::string, channels_last, "auto",
          "auto, on or off: run an NCHW network channels-last inside (resnet)");
ABSL_FLAG(bool, measure_conv, false, "pick convolution algorithms by timing them");
ABSL_FLAG(bool, narrow_conv, true,
          "convolutions of inputs with at most 4 channels (the stem) run as reprise's own "
          "kernels (false: cuDNN)");
ABSL_FLAG(
    bool, own_wgrad, false,
    "TrainOptions::kernels.own_weight_gradients: 3x3 weight gradients of wide NHWC TF32 images run "
    "as reprise's own kernel (false: cuDNN)");
ABSL_FLAG(std::string, conv_api, "legacy",
          "TrainOptions::kernels.conv_api: legacy or graph (cuDNN's graph API through "
          "cudnn-frontend)");
ABSL_FLAG(bool, conv_bn_stats, false,
          "TrainOptions::kernels.conv_batch_norm_stats: with --conv_api=graph, batch-norm "
          "statistics summed in the convolution's epilogue");
ABSL_FLAG(bool, measure_matmul, false,
          "TrainOptions::kernels.measure_matmul_algorithms: time cuBLASLt's candidates at Create");
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
          "scaling (TrainOptions::compute_dtype, loss_scale)");
ABSL_FLAG(int, lanes, 0, "0 (auto), 1, 2, 3 or 4 concurrent lanes");
ABSL_FLAG(std::string, graph_launch, "auto",
          "graph mode: auto, host or device: who launches the captured step "
          "(TrainOptions::graph_launch); rows launched from the device read graph+devlaunch");
ABSL_FLAG(std::string, fusion, "all",
          "on (every fusion, the whole-step MLP kernel included), per-layer (no whole-step "
          "kernel), off, or all three; rows say /per-layer and /unfused");
ABSL_FLAG(bool, relu_epilogues, false,
          "with fusion: hidden ReLU layers' backward in cuBLASLt DRELU_BGRAD epilogues "
          "(TrainOptions::kernels.relu_backward_epilogues)");
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
ABSL_FLAG(
    std::string, optimizer, "sgd",
    "sgd (momentum 0.9, lr 0.01), nesterov, adam or adamw (lr 1e-3, weight decay 0.01 but not "
    "on biases): TrainOptions::optimizer, all on the device");
ABSL_FLAG(double, max_grad_norm, 0, "global gradient-norm clipping at this norm; 0: off");
ABSL_FLAG(std::string, schedule, "constant",
          "learning-rate decay after the warm-up: constant, cosine (over --total_steps) or step");
ABSL_FLAG(int, warmup_steps, 0, "linear learning-rate warm-up steps");
ABSL_FLAG(int, total_steps, 10000, "steps of the cosine schedule; step size of the step decay");
ABSL_FLAG(std::string, non_finite, "skip",
          "the non-finite guard (TrainOptions::non_finite): skip (the default), stop or ignore "
          "(no check; the whole-step MLP kernel runs only then)");
ABSL_FLAG(bool, compare_torch, false,
          "also run tools/bench/torch_mlp.py (python3) for this configuration and print ratios");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-bench",
    "[--model mlp|resnet|ensemble] [--depth N] [--width N] [--batch N] [--mode "
    "sync|bulked|graph|all|none] [--fusion on|per-layer|off|all] [--json FILE] ...\n"
    "  ms per training step of a model for each execution mode, timed with CUDA events.",
    __FILE__};

// Every flag with a fixed set or range of values, checked before any device work.
absl::Status CheckBenchFlags() {
  namespace cli = reprise::cli;
  const std::string model = absl::GetFlag(FLAGS_model);
  for (const absl::Status& check : {
           cli::OneOf("model", FLAGS_model, {"mlp", "resnet", "ensemble"}),
           model == "resnet" ? cli::OneOf("depth", FLAGS_depth, {18, 34, 50, 101, 152})
                             : cli::AtLeast("depth", FLAGS_depth, 0),
           cli::AtLeast("ensemble", FLAGS_ensemble, 1),
           cli::AtLeast("input_features", FLAGS_input_features, 0),
           cli::AtLeast("width", FLAGS_width, 1),
           cli::AtLeast("batch", FLAGS_batch, 1),
           cli::AtLeast("classes", FLAGS_classes, 2),
           cli::AtLeast("image_size", FLAGS_image_size, 32),
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
  if (absl::Status mirror = reprise::ParseMirrorOptions(absl::GetFlag(FLAGS_mirror)).status();
      !mirror.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mirror: ", mirror.message()));
  }
  if (absl::GetFlag(FLAGS_bf16) && absl::GetFlag(FLAGS_fp16)) {
    return absl::InvalidArgumentError("--bf16 and --fp16 exclude each other");
  }
  return absl::OkStatus();
}

// TimeSteps(steps), in chunks of about five seconds when the steps would take longer than ten in
// all (`step_s` estimates one step), saying on stderr how far it got after each chunk. Each chunk
// starts on an idle device, so its first step's time includes the host's launch: short runs stay
// one chunk, and in a long one (steps of many ms) that launch is a negligible part of a step.
absl::StatusOr<std::vector<float>> TimeStepsShowingProgress(reprise::Trainer& trainer, int steps,
                                                            double step_s, absl::string_view what) {
  if (steps * step_s < 10) return trainer.TimeSteps(steps);
  const int chunk = std::max(1, static_cast<int>(5 / step_s));
  const absl::Time start = absl::Now();
  std::vector<float> ms;
  while (static_cast<int>(ms.size()) < steps) {
    ASSIGN_OR_RETURN(std::vector<float> part,
                     trainer.TimeSteps(std::min(chunk, steps - static_cast<int>(ms.size()))));
    ms.insert(ms.end(), part.begin(), part.end());
    std::fprintf(stderr, "reprise-bench: %.*s: %zu/%d steps (%.0f s)\n",
                 static_cast<int>(what.size()), what.data(), ms.size(), steps,
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return ms;
}

struct Result {
  std::string mode;
  double median_ms = 0, p90_ms = 0;
  double host_us_per_step = 0;  // Median host time of one Step() call, the device idle.
  int64_t launches = 0, graph_nodes = 0, arena_bytes = 0;
  int64_t device_bytes = 0;      // Device memory the trainer holds (arena, workspaces, handles).
  double kernel_acquire_ms = 0;  // Trainer::Create's time for kernels and cuBLASLt plans.
  int64_t kernels_compiled = 0, kernel_disk_hits = 0;
  double busy_fraction = -1;  // GPU busy time (CUPTI) over step time; -1 without CUPTI.
  int64_t activation_peak_bytes = 0, activation_peak_unmirrored_bytes = 0, mirrored_nodes = 0;
  std::string path;  // Which form the step took (StepPath).
  // Host time of Step() right after SetInput wrote the next batch, as in a training loop (the
  // host has just been busy rather than asleep in Synchronize()); -1 with --inputs device.
  double host_us_after_input = -1;
};

// "whole step" (mlp_train_step), "whole step, K models" (batched_mlp_train_step), "batched
// per-layer" (an ensemble batched into per-layer launches) or "per-layer".
std::string StepPath(const reprise::Graph& training) {
  bool batched = false;
  for (const reprise::Node& node : training.nodes()) {
    if (node.op_name() == "mlp_train_step") return "whole step";
    if (node.op_name() == "batched_mlp_train_step") {
      return absl::StrCat("whole step, ", training.spec(node.inputs[6]).shape.dim(0), " models");
    }
    batched |= absl::StartsWith(node.op_name(), "batched_");
  }
  return batched ? "batched per-layer" : "per-layer";
}

// --bf16 or --fp16 (Main refuses both), else float32.
reprise::DType ComputeDType() {
  if (absl::GetFlag(FLAGS_fp16)) return reprise::DType::kFloat16;
  if (absl::GetFlag(FLAGS_bf16)) return reprise::DType::kBFloat16;
  return reprise::DType::kFloat32;
}

double Percentile(std::vector<float> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// --optimizer, --max_grad_norm, --schedule, --warmup_steps, --total_steps and --non_finite as
// TrainOptions.
absl::Status SetOptimizer(reprise::TrainOptions& options) {
  ASSIGN_OR_RETURN(options.non_finite.policy,
                   reprise::ParseNonFinitePolicy(absl::GetFlag(FLAGS_non_finite)));
  const std::string kind = absl::GetFlag(FLAGS_optimizer), decay = absl::GetFlag(FLAGS_schedule);
  reprise::OptimizerOptions o;
  if (kind == "adam" || kind == "adamw") {
    o = {.kind = kind == "adam" ? reprise::OptimizerKind::kAdam : reprise::OptimizerKind::kAdamW,
         .learning_rate = 1e-3f,
         .weight_decay = 0.01f,
         .decay_rank1 = false};
  } else if (kind == "nesterov") {
    o.nesterov = true;
  } else if (kind != "sgd") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd, nesterov, adam or adamw, not '", kind, "'"));
  }
  o.max_grad_norm = static_cast<float>(absl::GetFlag(FLAGS_max_grad_norm));
  o.schedule.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  const int total = absl::GetFlag(FLAGS_total_steps);
  if (decay == "cosine") {
    o.schedule.decay = reprise::LrDecay::kCosine;
    o.schedule.total_steps = total;
  } else if (decay == "step") {
    o.schedule.decay = reprise::LrDecay::kStep;
    o.schedule.step_size = total;
  } else if (decay != "constant") {
    return absl::InvalidArgumentError(
        absl::StrCat("--schedule must be constant, cosine or step, not '", decay, "'"));
  }
  const bool plain_sgd =
      kind == "sgd" && o.max_grad_norm == 0 && o.schedule.warmup_steps == 0 && decay == "constant";
  if (!plain_sgd) options.optimizer = o;  // Plain SGD keeps TrainOptions::sgd's fused paths.
  return absl::OkStatus();
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

absl::StatusOr<reprise::KernelTuning::ConvApi> ConvApiFlag() {
  const std::string value = absl::GetFlag(FLAGS_conv_api);
  if (value == "legacy") return reprise::KernelTuning::ConvApi::kLegacy;
  if (value == "graph") return reprise::KernelTuning::ConvApi::kGraph;
  return absl::InvalidArgumentError(
      absl::StrCat("--conv_api must be legacy or graph, not '", value, "'"));
}

// The TrainOptions every trainer of this run shares, from the flags: precision, lanes, kernels,
// layout, mirroring, ensembles, the optimizer and the non-finite guard.
absl::StatusOr<reprise::TrainOptions> OptionsFromFlags(reprise::ExecMode mode) {
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.mode = mode;
  options.allow_tf32 = absl::GetFlag(FLAGS_tf32);
  options.compute_dtype = ComputeDType();
  options.lanes = absl::GetFlag(FLAGS_lanes);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  options.kernels.relu_backward_epilogues = absl::GetFlag(FLAGS_relu_epilogues);
  options.kernels.measure_conv_algorithms = absl::GetFlag(FLAGS_measure_conv);
  options.kernels.narrow_convolutions = absl::GetFlag(FLAGS_narrow_conv);
  options.kernels.own_weight_gradients = absl::GetFlag(FLAGS_own_wgrad);
  options.kernels.measure_matmul_algorithms = absl::GetFlag(FLAGS_measure_matmul);
  if (absl::GetFlag(FLAGS_ensemble_whole_step_max_models) >= 0) {
    options.kernels.ensemble_whole_step_max_models =
        absl::GetFlag(FLAGS_ensemble_whole_step_max_models);
  }
  ASSIGN_OR_RETURN(options.channels_last, ChannelsLastFlag());
  ASSIGN_OR_RETURN(options.kernels.conv_api, ConvApiFlag());
  options.kernels.conv_batch_norm_stats = absl::GetFlag(FLAGS_conv_bn_stats);
  ASSIGN_OR_RETURN(options.mirror, reprise::ParseMirrorOptions(absl::GetFlag(FLAGS_mirror)));
  options.batch_ensembles = absl::GetFlag(FLAGS_batch_ensembles);
  RETURN_IF_ERROR(SetOptimizer(options));
  return options;
}

// The benchmarked model with one random batch for each of its inputs.
struct Model {
  reprise::Graph graph;
  reprise::Value loss;
  std::string feature_input;
  int64_t feature_count = 0;
  int64_t classes = 0;
  // Each input pair is "<prefix><feature_input>" and "<prefix>labels": one model's, or each
  // model's of an ensemble ("m0.", "m1.", ...).
  std::vector<std::string> prefixes = {""};
};

// Binds the same batch to every model's inputs.
absl::Status SetInputs(reprise::Trainer& trainer, const Model& model, const std::vector<float>& x,
                       const std::vector<int32_t>& y) {
  for (const std::string& prefix : model.prefixes) {
    RETURN_IF_ERROR(trainer.SetInput(prefix + model.feature_input, x));
    RETURN_IF_ERROR(trainer.SetInput(prefix + "labels", y));
  }
  return absl::OkStatus();
}

// --inputs device: the batch in device memory, bound to every model's inputs. The buffers must
// outlive the trainer's steps.
absl::StatusOr<std::vector<reprise::runtime::DeviceBuffer>> BindDeviceInputs(
    reprise::Trainer& trainer, const Model& model, const std::vector<float>& x,
    const std::vector<int32_t>& y) {
  std::vector<reprise::runtime::DeviceBuffer> buffers;
  const auto bind = [&](const std::string& name, const void* data, size_t bytes) -> absl::Status {
    ASSIGN_OR_RETURN(reprise::runtime::DeviceBuffer buffer,
                     reprise::runtime::DeviceBuffer::Create(bytes));
    if (const cudaError_t e = cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("cudaMemcpy of input '", name, "' to the device: ", cudaGetErrorString(e)));
    }
    RETURN_IF_ERROR(trainer.BindInput(name, buffer.data(), bytes));
    buffers.push_back(std::move(buffer));
    return absl::OkStatus();
  };
  if (model.prefixes.size() > 1 && absl::GetFlag(FLAGS_batch_ensembles)) {
    // A batched ensemble's inputs are stacked [K, ...] under "m*.": bound whole, one copy each
    // (binding every model's slice would add K copies to the step).
    std::vector<float> xs;
    std::vector<int32_t> ys;
    for (size_t k = 0; k < model.prefixes.size(); ++k) {
      xs.insert(xs.end(), x.begin(), x.end());
      ys.insert(ys.end(), y.begin(), y.end());
    }
    RETURN_IF_ERROR(bind("m*." + model.feature_input, xs.data(), xs.size() * sizeof(float)));
    RETURN_IF_ERROR(bind("m*.labels", ys.data(), ys.size() * sizeof(int32_t)));
    return buffers;
  }
  for (const std::string& prefix : model.prefixes) {
    RETURN_IF_ERROR(bind(prefix + model.feature_input, x.data(), x.size() * sizeof(float)));
    RETURN_IF_ERROR(bind(prefix + "labels", y.data(), y.size() * sizeof(int32_t)));
  }
  return buffers;
}

absl::StatusOr<Model> BuildModel() {
  const std::string name = absl::GetFlag(FLAGS_model);
  const int batch = absl::GetFlag(FLAGS_batch), classes = absl::GetFlag(FLAGS_classes);
  const int input_features = absl::GetFlag(FLAGS_input_features) > 0
                                 ? absl::GetFlag(FLAGS_input_features)
                                 : absl::GetFlag(FLAGS_width);
  if (name == "ensemble") {
    const int models = absl::GetFlag(FLAGS_ensemble);
    ASSIGN_OR_RETURN(reprise::models::MlpEnsemble ensemble,
                     reprise::models::BuildMlpEnsemble(models, {.batch = batch,
                                                                .input_features = input_features,
                                                                .depth = absl::GetFlag(FLAGS_depth),
                                                                .width = absl::GetFlag(FLAGS_width),
                                                                .classes = classes}));
    Model model{std::move(ensemble.graph), ensemble.loss, "features",
                int64_t{batch} * input_features, classes};
    model.prefixes.clear();
    for (int k = 0; k < models; ++k) model.prefixes.push_back(absl::StrCat("m", k, "."));
    return model;
  }
  if (name == "mlp") {
    const int width = absl::GetFlag(FLAGS_width);
    ASSIGN_OR_RETURN(reprise::models::Mlp mlp,
                     reprise::models::BuildMlp({.batch = batch,
                                                .input_features = input_features,
                                                .depth = absl::GetFlag(FLAGS_depth),
                                                .width = width,
                                                .classes = classes}));
    return Model{std::move(mlp.graph), mlp.loss, "features", int64_t{batch} * input_features,
                 classes};
  }
  if (name == "resnet") {
    const std::string layout = absl::GetFlag(FLAGS_layout);
    if (layout != "nchw" && layout != "nhwc") {
      return absl::InvalidArgumentError(
          absl::StrCat("--layout must be nchw or nhwc, not '", layout, "'"));
    }
    const int size = absl::GetFlag(FLAGS_image_size);
    ASSIGN_OR_RETURN(
        reprise::models::ResNet net,
        reprise::models::BuildResNet(
            {.depth = absl::GetFlag(FLAGS_depth),
             .batch = batch,
             .classes = classes,
             .image_size = size,
             .layout = layout == "nhwc" ? reprise::Layout::kNHWC : reprise::Layout::kNCHW}));
    return Model{std::move(net.graph), net.loss, "images", int64_t{batch} * 3 * size * size,
                 classes};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --model '", name, "': this version knows mlp, resnet and ensemble"));
}

// Fresh random data, never zeros (the same for every measurement of a run).
std::pair<std::vector<float>, std::vector<int32_t>> RandomInputs(const Model& model, int batch) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(model.classes) - 1);
  std::vector<float> x(model.feature_count);
  std::vector<int32_t> y(batch);
  for (float& v : x) v = normal(rng);
  for (int32_t& v : y) v = label(rng);
  return {std::move(x), std::move(y)};
}

// --inputs host: copies them into the trainer's input buffers; device: binds device copies (kept
// alive by the caller), so each step's input copy is a device-to-device one.
absl::StatusOr<std::vector<reprise::runtime::DeviceBuffer>> FeedInputs(
    reprise::Trainer& trainer, const Model& model, const std::vector<float>& x,
    const std::vector<int32_t>& y) {
  if (absl::GetFlag(FLAGS_inputs) == "device") return BindDeviceInputs(trainer, model, x, y);
  RETURN_IF_ERROR(SetInputs(trainer, model, x, y));
  return std::vector<reprise::runtime::DeviceBuffer>();
}

absl::StatusOr<Result> Measure(reprise::ExecMode mode, Fusion fusion) {
  const int batch = absl::GetFlag(FLAGS_batch);
  ASSIGN_OR_RETURN(Model model, BuildModel());
  ASSIGN_OR_RETURN(const int64_t memory_before, reprise::runtime::DeviceMemoryInUse());
  ASSIGN_OR_RETURN(reprise::TrainOptions options, OptionsFromFlags(mode));
  options.fuse = fusion != Fusion::kOff;
  options.whole_step = fusion == Fusion::kOn;
  if (mode == reprise::ExecMode::kGraph) {
    ASSIGN_OR_RETURN(options.graph_launch,
                     reprise::ParseGraphLaunch(absl::GetFlag(FLAGS_graph_launch)));
    // CUPTI's kernel activity tracing and a device-launched step fault together ("unspecified
    // launch failure" in the traced steps; H200, driver 580), so the busy fraction is
    // measured on host-launched steps (their rows read "graph", not "graph+devlaunch").
    if (absl::GetFlag(FLAGS_busy)) {
      if (options.graph_launch == reprise::GraphLaunch::kDevice) {
        return absl::InvalidArgumentError(
            "--busy traces kernels with CUPTI, which faults device-launched steps: use "
            "--graph_launch=auto or host");
      }
      options.graph_launch = reprise::GraphLaunch::kHost;
    }
  }
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  const auto [x, y] = RandomInputs(model, batch);
  ASSIGN_OR_RETURN(std::vector<reprise::runtime::DeviceBuffer> device_inputs,
                   FeedInputs(*trainer, model, x, y));
  // The warm-up's steps estimate the timed ones, which report progress when they run long.
  ASSIGN_OR_RETURN(const std::vector<float> warmup_ms,
                   trainer->TimeSteps(absl::GetFlag(FLAGS_warmup)));
  ASSIGN_OR_RETURN(std::vector<float> ms,
                   TimeStepsShowingProgress(
                       *trainer, absl::GetFlag(FLAGS_iters), Percentile(warmup_ms, 0.5) / 1000,
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
  std::vector<float> host_us_after_input;
  for (int i = 0;
       absl::GetFlag(FLAGS_inputs) == "host" && i < std::min(absl::GetFlag(FLAGS_iters), 200);
       ++i) {
    RETURN_IF_ERROR(SetInputs(*trainer, model, x, y));  // Waits for the step before.
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
  Result result{absl::StrCat(reprise::ExecModeName(mode),
                             stats.device_graph_launch ? "+devlaunch" : "", FusionSuffix(fusion)),
                Percentile(ms, 0.5),
                Percentile(ms, 0.9),
                Percentile(host_us, 0.5),
                stats.launches_per_step,
                stats.graph_nodes,
                stats.arena_bytes,
                memory_after - memory_before,
                stats.kernel_acquire_ms,
                stats.kernels_compiled,
                stats.kernel_disk_hits,
                busy_fraction};
  if (!host_us_after_input.empty()) {
    result.host_us_after_input = Percentile(host_us_after_input, 0.5);
  }
  result.activation_peak_bytes = stats.activation_peak_bytes;
  result.activation_peak_unmirrored_bytes = stats.activation_peak_unmirrored_bytes;
  result.mirrored_nodes = stats.mirrored_nodes;
  result.path = StepPath(trainer->training_graph());
  return result;
}

// A bulked trainer of the flags' configuration, its inputs set: for the per-launch reports.
struct BulkedTrainer {
  Model model;
  std::unique_ptr<reprise::Trainer> trainer;
  std::vector<reprise::runtime::DeviceBuffer> device_inputs;  // Bound with --inputs device.
};
absl::StatusOr<BulkedTrainer> CreateBulkedTrainer() {
  ASSIGN_OR_RETURN(Model model, BuildModel());
  ASSIGN_OR_RETURN(const reprise::TrainOptions options,
                   OptionsFromFlags(reprise::ExecMode::kBulked));
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  const auto [x, y] = RandomInputs(model, absl::GetFlag(FLAGS_batch));
  ASSIGN_OR_RETURN(std::vector<reprise::runtime::DeviceBuffer> device_inputs,
                   FeedInputs(*trainer, model, x, y));
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
  ASSIGN_OR_RETURN(Model model, BuildModel());
  ASSIGN_OR_RETURN(reprise::TrainOptions options, OptionsFromFlags(reprise::ExecMode::kGraph));
  options.deterministic = true;  // Bitwise agreement needs algorithms without atomics.
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(model.feature_count);
  std::vector<int32_t> y(absl::GetFlag(FLAGS_batch));
  for (float& v : x) v = normal(rng);
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % model.classes);
  RETURN_IF_ERROR(SetInputs(*trainer, model, x, y));
  ASSIGN_OR_RETURN(const reprise::VerifyResult result, trainer->Verify(steps));
  std::printf("%s\n%s", result.ToString().c_str(), trainer->Report().ToText().c_str());
  return result.ok() ? absl::OkStatus() : absl::InternalError("verify mode found a difference");
}

// Runs the PyTorch script for this configuration and prints each of its modes beside reprise's
// fused graph mode. The script prints "torch <mode> ... median_ms=X p90_ms=Y" per mode.
absl::Status CompareTorch(double graph_ms) {
  const bool resnet = absl::GetFlag(FLAGS_model) == "resnet";
  const int input_features = absl::GetFlag(FLAGS_input_features) > 0
                                 ? absl::GetFlag(FLAGS_input_features)
                                 : absl::GetFlag(FLAGS_width);
  const std::string model_flags =
      absl::GetFlag(FLAGS_model) == "ensemble"
          ? absl::StrFormat(
                "torch_ensemble.py --models %d --input-features %d --depth %d --width %d%s",
                absl::GetFlag(FLAGS_ensemble), input_features, absl::GetFlag(FLAGS_depth),
                absl::GetFlag(FLAGS_width), absl::GetFlag(FLAGS_tf32) ? " --tf32" : "")
      : resnet
          ? absl::StrFormat("torch_resnet.py --depth %d --image-size %d --layout %s --precision %s",
                            absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_image_size),
                            absl::GetFlag(FLAGS_layout),
                            absl::GetFlag(FLAGS_fp16)   ? "fp16"
                            : absl::GetFlag(FLAGS_bf16) ? "bf16"
                            : absl::GetFlag(FLAGS_tf32) ? "tf32"
                                                        : "fp32")
          : absl::StrFormat("torch_mlp.py --depth %d --width %d%s", absl::GetFlag(FLAGS_depth),
                            absl::GetFlag(FLAGS_width), absl::GetFlag(FLAGS_tf32) ? " --tf32" : "");
  const std::string command =
      absl::StrFormat("python3 tools/bench/%s --batch %d --classes %d --iters %d --warmup %d 2>&1",
                      model_flags, absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_classes),
                      absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_warmup));
  std::fprintf(stderr, "reprise-bench: running %s\n", command.c_str());
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::UnavailableError("--compare_torch: cannot start python3");
  std::printf("\n%-16s %11s %22s\n", "torch mode", "median ms", "reprise graph / torch");
  char line[1024];
  bool any = false;
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    char mode[64];
    double median = 0;
    const char* at = std::strstr(line, "median_ms=");
    if (std::strncmp(line, "torch ", 6) != 0 || at == nullptr ||
        std::sscanf(line + 6, "%63s", mode) != 1 || std::sscanf(at, "median_ms=%lf", &median) != 1)
      continue;
    any = true;
    std::printf("%-16s %11.4f %22.3f\n", mode, median, graph_ms > 0 ? graph_ms / median : 0.0);
  }
  const int status = pclose(pipe);
  if (!any) {
    return absl::UnavailableError(
        absl::StrCat("--compare_torch: ", command, " gave no timings (exit ", status, ")"));
  }
  return absl::OkStatus();
}

// " ensemble=K batch_ensembles=0|1 input_features=N" for the ensemble model, else "".
std::string EnsembleConfig() {
  if (absl::GetFlag(FLAGS_model) != "ensemble") return "";
  return absl::StrFormat(" ensemble=%d batch_ensembles=%d input_features=%d",
                         absl::GetFlag(FLAGS_ensemble), absl::GetFlag(FLAGS_batch_ensembles),
                         absl::GetFlag(FLAGS_input_features));
}

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
  const std::string config = absl::StrFormat(
      "%s depth=%d width=%d image_size=%d layout=%s channels_last=%s batch=%d classes=%d tf32=%d "
      "bf16=%d lanes=%d mirror=%s optimizer=%s max_grad_norm=%g warmup_steps=%d schedule=%s%s",
      absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_width),
      absl::GetFlag(FLAGS_image_size), absl::GetFlag(FLAGS_layout),
      absl::GetFlag(FLAGS_channels_last), absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_classes),
      absl::GetFlag(FLAGS_tf32), absl::GetFlag(FLAGS_bf16), absl::GetFlag(FLAGS_lanes),
      absl::GetFlag(FLAGS_mirror), absl::GetFlag(FLAGS_optimizer),
      absl::GetFlag(FLAGS_max_grad_norm), absl::GetFlag(FLAGS_warmup_steps),
      absl::GetFlag(FLAGS_schedule), EnsembleConfig());
  std::printf("reprise-bench %s%s%s%s%s%s on %s\n", config.c_str(),
              absl::GetFlag(FLAGS_fp16) ? " fp16=1" : "",
              absl::GetFlag(FLAGS_narrow_conv) ? "" : " narrow_conv=0",
              absl::GetFlag(FLAGS_own_wgrad) ? " own_wgrad=1" : "",
              absl::GetFlag(FLAGS_inputs) == "device" ? " inputs=device" : "",
              absl::GetFlag(FLAGS_graph_launch) == "auto"
                  ? ""
                  : absl::StrCat(" graph_launch=", absl::GetFlag(FLAGS_graph_launch)).c_str(),
              device.name.c_str());
  std::printf("%-16s %11s %11s %12s %10s %9s %11s %11s %6s %17s\n", "mode", "median ms", "p90 ms",
              "samples/s", "host us", "launches", "graph nodes", "device MiB", "busy",
              "activation MiB");
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
      ASSIGN_OR_RETURN(Result r, Measure(mode, fuse));
      const double samples = absl::GetFlag(FLAGS_batch) / (r.median_ms / 1000.0);
      const std::string busy =
          r.busy_fraction < 0 ? "n/a" : absl::StrFormat("%.0f%%", 100 * r.busy_fraction);
      // The activation peak, and without mirroring where nodes are mirrored.
      const std::string activation =
          r.mirrored_nodes == 0
              ? absl::StrFormat("%.1f", r.activation_peak_bytes / 1048576.0)
              : absl::StrFormat("%.1f (%.1f)", r.activation_peak_bytes / 1048576.0,
                                r.activation_peak_unmirrored_bytes / 1048576.0);
      std::printf("%-16s %11.4f %11.4f %12.0f %10.2f %9lld %11lld %11.1f %6s %17s\n",
                  r.mode.c_str(), r.median_ms, r.p90_ms, samples, r.host_us_per_step,
                  static_cast<long long>(r.launches), static_cast<long long>(r.graph_nodes),
                  r.device_bytes / 1048576.0, busy.c_str(), activation.c_str());
      std::fprintf(
          stderr, "reprise-bench: %s kernels acquired in %.1f ms (%lld compiled, %lld from disk)\n",
          r.mode.c_str(), r.kernel_acquire_ms, static_cast<long long>(r.kernels_compiled),
          static_cast<long long>(r.kernel_disk_hits));
      std::printf("%-16s path: %s\n", "", r.path.c_str());
      if (r.host_us_after_input >= 0) {
        std::printf("%-16s host us per Step() right after SetInput: %.2f\n", "",
                    r.host_us_after_input);
      }
      if (r.mode == "graph" || r.mode == "graph+devlaunch") graph_ms = r.median_ms;
      json_results.push_back(absl::StrFormat(
          "\"%s\": {\"median_ms\": %.6f, \"p90_ms\": %.6f, \"samples_per_s\": %.1f, "
          "\"host_us_per_step\": %.3f, \"launches_per_step\": %d, \"graph_nodes\": %d, "
          "\"arena_bytes\": %d, \"device_bytes\": %d, \"kernel_acquire_ms\": %.3f, "
          "\"kernels_compiled\": %d, \"kernel_disk_hits\": %d, \"gpu_busy_fraction\": %s, "
          "\"activation_peak_bytes\": %d, \"activation_peak_unmirrored_bytes\": %d, "
          "\"mirrored_nodes\": %d, \"path\": \"%s\", \"host_us_after_input\": %s}",
          r.mode, r.median_ms, r.p90_ms, samples, r.host_us_per_step, r.launches, r.graph_nodes,
          r.arena_bytes, r.device_bytes, r.kernel_acquire_ms, r.kernels_compiled,
          r.kernel_disk_hits,
          r.busy_fraction < 0 ? "null" : absl::StrFormat("%.4f", r.busy_fraction),
          r.activation_peak_bytes, r.activation_peak_unmirrored_bytes, r.mirrored_nodes, r.path,
          r.host_us_after_input < 0 ? "null" : absl::StrFormat("%.3f", r.host_us_after_input)));
    }
  }
  if (absl::GetFlag(FLAGS_profile) > 0) RETURN_IF_ERROR(Profile());
  if (absl::GetFlag(FLAGS_timeline) > 0) RETURN_IF_ERROR(Timeline());
  if (absl::GetFlag(FLAGS_verify) > 0) RETURN_IF_ERROR(VerifyModel(absl::GetFlag(FLAGS_verify)));
  if (absl::GetFlag(FLAGS_compare_torch)) RETURN_IF_ERROR(CompareTorch(graph_ms));
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << absl::StrFormat(
        "{\"tool\": \"reprise-bench\", \"gpu\": \"%s\", \"date\": \"%s\", \"config\": {\"model\": "
        "\"%s\", \"depth\": %d, \"width\": %d, \"image_size\": %d, \"layout\": \"%s\", "
        "\"channels_last\": \"%s\", "
        "\"batch\": %d, \"classes\": %d, \"tf32\": %s, \"bf16\": %s, \"fp16\": %s, "
        "\"lanes\": %d, \"mirror\": \"%s\", \"inputs\": \"%s\", "
        "\"iters\": %d, \"warmup\": %d%s}, \"results\": {%s}}\n",
        device.name, absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()),
        absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_width),
        absl::GetFlag(FLAGS_image_size), absl::GetFlag(FLAGS_layout),
        absl::GetFlag(FLAGS_channels_last), absl::GetFlag(FLAGS_batch),
        absl::GetFlag(FLAGS_classes), absl::GetFlag(FLAGS_tf32) ? "true" : "false",
        absl::GetFlag(FLAGS_bf16) ? "true" : "false", absl::GetFlag(FLAGS_fp16) ? "true" : "false",
        absl::GetFlag(FLAGS_lanes), absl::GetFlag(FLAGS_mirror), absl::GetFlag(FLAGS_inputs),
        absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_warmup),
        absl::GetFlag(FLAGS_model) != "ensemble"
            ? ""
            : absl::StrFormat(", \"ensemble\": %d, \"batch_ensembles\": %s, "
                              "\"input_features\": %d",
                              absl::GetFlag(FLAGS_ensemble),
                              absl::GetFlag(FLAGS_batch_ensembles) ? "true" : "false",
                              absl::GetFlag(FLAGS_input_features)),
        absl::StrJoin(json_results, ", "));
    if (!out) return absl::UnavailableError(absl::StrCat("could not write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  reprise::cli::ParseCommandLine(argc, argv, kProgram);
  reprise::cli::CheckFlags(kProgram, {CheckBenchFlags()});
  return reprise::cli::Finish(kProgram, Main());
}
