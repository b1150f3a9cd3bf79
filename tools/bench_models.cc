#include "tools/bench_models.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "reprise/models.h"
#include "src/api/models_gpt2.h"
#include "src/util/status_macros.h"

namespace reprise::tools {
namespace {

// Fresh random data, never zeros: normal features, labels uniform over `classes`.
BenchInput RandomFloats(std::string name, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  BenchInput input{std::move(name), std::vector<float>(count), {}};
  for (float& v : input.f32) v = normal(rng);
  return input;
}
BenchInput RandomLabels(std::string name, int64_t count, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes) - 1);
  BenchInput input{std::move(name), {}, std::vector<int32_t>(count)};
  for (int32_t& v : input.i32) v = label(rng);
  return input;
}

models::MlpConfig MlpConfigOf(const BenchModelConfig& c) {
  return {.batch = c.batch,
          .input_features = c.input_features > 0 ? c.input_features : c.width,
          .depth = c.depth,
          .width = c.width,
          .classes = c.classes};
}

absl::StatusOr<BenchModel> Mlp(const BenchModelConfig& c) {
  const models::MlpConfig config = MlpConfigOf(c);
  ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp(config));
  BenchModel model{.graph = std::move(mlp.graph), .loss = mlp.loss};
  model.inputs = {RandomFloats("features", c.batch * config.input_features, 7),
                  RandomLabels("labels", c.batch, c.classes, 8)};
  model.samples_per_step = c.batch;
  model.classes = c.classes;
  return model;
}

// The same batch for every model: each model's inputs, and all of them stacked.
absl::StatusOr<BenchModel> Ensemble(const BenchModelConfig& c) {
  const models::MlpConfig config = MlpConfigOf(c);
  ASSIGN_OR_RETURN(models::MlpEnsemble ensemble, models::BuildMlpEnsemble(c.ensemble, config));
  BenchModel model{.graph = std::move(ensemble.graph), .loss = ensemble.loss};
  const BenchInput x = RandomFloats("features", c.batch * config.input_features, 7);
  const BenchInput y = RandomLabels("labels", c.batch, c.classes, 8);
  BenchInput xs{"m*.features", {}, {}}, ys{"m*.labels", {}, {}};
  for (int k = 0; k < c.ensemble; ++k) {
    const std::string prefix = absl::StrCat("m", k, ".");
    model.inputs.push_back({prefix + x.name, x.f32, {}});
    model.inputs.push_back({prefix + y.name, {}, y.i32});
    xs.f32.insert(xs.f32.end(), x.f32.begin(), x.f32.end());
    ys.i32.insert(ys.i32.end(), y.i32.begin(), y.i32.end());
  }
  model.stacked_inputs = {std::move(xs), std::move(ys)};
  model.samples_per_step = c.batch;
  model.classes = c.classes;
  return model;
}

absl::StatusOr<BenchModel> ResNet(const BenchModelConfig& c) {
  if (c.layout != "nchw" && c.layout != "nhwc") {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout must be nchw or nhwc, not '", c.layout, "'"));
  }
  ASSIGN_OR_RETURN(
      models::ResNet net,
      models::BuildResNet({.depth = static_cast<int>(c.depth),
                           .batch = c.batch,
                           .classes = c.classes,
                           .image_size = c.image_size,
                           .layout = c.layout == "nhwc" ? Layout::kNHWC : Layout::kNCHW,
                           .image_channels = c.image_channels}));
  BenchModel model{.graph = std::move(net.graph), .loss = net.loss};
  const int64_t pixels = c.batch * c.image_size * c.image_size;
  BenchInput images = RandomFloats("images", pixels * c.image_channels, 7);
  if (c.image_channels == 4) {  // The padding channel: NHWC's every fourth value, NCHW's planes.
    const int64_t plane = c.image_size * c.image_size;
    for (int64_t p = 0; p < pixels; ++p) {
      const int64_t at = c.layout == "nhwc" ? 4 * p + 3 : (p / plane * 4 + 3) * plane + p % plane;
      images.f32[at] = 0.0f;
    }
  }
  model.inputs = {std::move(images), RandomLabels("labels", c.batch, c.classes, 8)};
  model.samples_per_step = c.batch;
  model.classes = c.classes;
  return model;
}

// Random tokens and targets, as the peers' benchmarks (llm.c, nanoGPT) time GPT-2.
absl::StatusOr<BenchModel> Gpt2(const BenchModelConfig& c) {
  const models::Gpt2Config config{.batch = c.batch,
                                  .seq = c.seq,
                                  .max_positions = std::max<int64_t>(1024, c.seq),
                                  .vocab = c.vocab,
                                  .layers = c.layers,
                                  .heads = c.heads,
                                  .width = c.gpt2_width,
                                  .padded_vocab = c.padded_vocab};
  ASSIGN_OR_RETURN(models::Gpt2 gpt, models::BuildGpt2(config));
  BenchModel model{.graph = std::move(gpt.graph), .loss = gpt.loss};
  const int64_t tokens = c.batch * c.seq;
  model.inputs = {RandomLabels("tokens", tokens, c.vocab, 7),
                  RandomLabels("targets", tokens, c.vocab, 8)};
  model.samples_per_step = c.batch;
  model.tokens_per_step = tokens;
  model.classes = c.vocab;
  model.parameters = model.graph.NumParameterElements();
  model.flops_per_step = Gpt2FlopsPerStep(model.parameters, c.layers, c.seq, c.gpt2_width, tokens);
  return model;
}

}  // namespace

double Gpt2FlopsPerStep(int64_t parameters, int64_t layers, int64_t seq, int64_t width,
                        int64_t tokens) {
  const double per_token =
      6.0 * static_cast<double>(parameters) +
      6.0 * static_cast<double>(layers) * static_cast<double>(seq) * static_cast<double>(width);
  return per_token * static_cast<double>(tokens);
}

absl::StatusOr<BenchModel> BuildBenchModel(const BenchModelConfig& config) {
  absl::StatusOr<BenchModel> model;
  if (config.model == "mlp") {
    model = Mlp(config);
  } else if (config.model == "ensemble") {
    model = Ensemble(config);
  } else if (config.model == "resnet") {
    model = ResNet(config);
  } else if (config.model == "gpt2") {
    model = Gpt2(config);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --model '", config.model, "': this version knows mlp, resnet, ensemble, gpt2"));
  }
  if (model.ok() && model->parameters == 0) {
    model->parameters = model->graph.NumParameterElements();
  }
  return model;
}

double PeakTflops(const std::string& device_name, const std::string& precision) {
  struct Peak {
    const char* name;  // A part of the device's name.
    double bf16, tf32, fp32;
  };
  // Dense tensor-core rates (no sparsity), as NVIDIA's data sheets give them; fp16 = bf16.
  static constexpr Peak kPeaks[] = {
      {"H100 PCIe", 756.0, 378.0, 51.2},
      {"H100", 989.4, 494.7, 66.9},  // SXM5.
      {"H200", 989.4, 494.7, 66.9},
      {"A100", 312.0, 156.0, 19.5},
  };
  for (const Peak& peak : kPeaks) {
    if (!absl::StrContains(device_name, peak.name)) continue;
    if (precision == "bf16" || precision == "fp16") return peak.bf16;
    if (precision == "tf32") return peak.tf32;
    if (precision == "fp32") return peak.fp32;
    return 0;
  }
  return 0;
}

namespace {

// The logits' columns the gpt2 model is built with.
int64_t Gpt2LogitsColumns(const BenchModelConfig& c) {
  return models::Gpt2LogitsWidth({.vocab = c.vocab, .padded_vocab = c.padded_vocab});
}

}  // namespace

std::string ModelConfigText(const BenchModelConfig& c) {
  if (c.model == "gpt2") {
    return absl::StrFormat("gpt2 batch=%d seq=%d layers=%d heads=%d width=%d vocab=%d logits=%d",
                           c.batch, c.seq, c.layers, c.heads, c.gpt2_width, c.vocab,
                           Gpt2LogitsColumns(c));
  }
  std::string text =
      absl::StrFormat("%s depth=%d width=%d image_size=%d layout=%s batch=%d classes=%d", c.model,
                      c.depth, c.width, c.image_size, c.layout, c.batch, c.classes);
  if (c.model == "resnet" && c.image_channels != 3) {
    absl::StrAppendFormat(&text, " image_channels=%d", c.image_channels);
  }
  if (c.model == "ensemble") {
    absl::StrAppendFormat(&text, " ensemble=%d input_features=%d", c.ensemble, c.input_features);
  }
  return text;
}

std::string ModelConfigJson(const BenchModelConfig& c) {
  if (c.model == "gpt2") {
    return absl::StrFormat(
        "\"model\": \"gpt2\", \"batch\": %d, \"seq\": %d, \"layers\": %d, \"heads\": %d, "
        "\"width\": %d, \"vocab\": %d, \"padded_vocab\": %d",
        c.batch, c.seq, c.layers, c.heads, c.gpt2_width, c.vocab, Gpt2LogitsColumns(c));
  }
  std::string json = absl::StrFormat(
      "\"model\": \"%s\", \"depth\": %d, \"width\": %d, \"image_size\": %d, \"layout\": "
      "\"%s\", \"batch\": %d, \"classes\": %d",
      c.model, c.depth, c.width, c.image_size, c.layout, c.batch, c.classes);
  if (c.model == "ensemble") {
    absl::StrAppendFormat(&json, ", \"ensemble\": %d, \"input_features\": %d", c.ensemble,
                          c.input_features);
  }
  if (c.model == "resnet")
    absl::StrAppendFormat(&json, ", \"image_channels\": %d", c.image_channels);
  return json;
}

absl::Status SetBenchInputs(Trainer& trainer, const BenchModel& model) {
  for (const BenchInput& input : model.inputs) {
    RETURN_IF_ERROR(input.i32.empty() ? trainer.SetInput(input.name, input.f32)
                                      : trainer.SetInput(input.name, input.i32));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<runtime::DeviceBuffer>> FeedBenchInputs(Trainer& trainer,
                                                                   const BenchModel& model,
                                                                   bool on_device, bool stacked) {
  std::vector<runtime::DeviceBuffer> buffers;
  if (!on_device) {
    RETURN_IF_ERROR(SetBenchInputs(trainer, model));
    return buffers;
  }
  // Binding every model's slice of a batched ensemble would add K copies to the step.
  stacked = stacked && !model.stacked_inputs.empty();
  for (const BenchInput& input : stacked ? model.stacked_inputs : model.inputs) {
    const bool ints = !input.i32.empty();
    const void* data = ints ? static_cast<const void*>(input.i32.data())
                            : static_cast<const void*>(input.f32.data());
    const size_t bytes =
        ints ? input.i32.size() * sizeof(int32_t) : input.f32.size() * sizeof(float);
    ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(bytes));
    if (const cudaError_t e = cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaMemcpy of input '", input.name,
                                              "' to the device: ", cudaGetErrorString(e)));
    }
    RETURN_IF_ERROR(trainer.BindInput(input.name, buffer.data(), bytes));
    buffers.push_back(std::move(buffer));
  }
  // A pageable cudaMemcpy may return before its DMA lands, on the legacy stream, which the
  // step's stream does not wait for.
  if (const cudaError_t e = cudaStreamSynchronize(cudaStreamLegacy); e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("waiting for the inputs' copies to the device: ", cudaGetErrorString(e)));
  }
  return buffers;
}

absl::StatusOr<std::optional<OptimizerOptions>> BenchOptimizer(const std::string& model,
                                                               const BenchOptimizerFlags& flags) {
  const bool gpt2_adamw = model == "gpt2" && !flags.optimizer.has_value();
  const std::string kind = flags.optimizer.value_or(gpt2_adamw ? "adamw" : "sgd");
  const std::string decay = flags.schedule.value_or(gpt2_adamw ? "cosine" : "constant");
  OptimizerOptions o;
  if (gpt2_adamw) {
    o = models::Gpt2AdamW();
  } else if (kind == "adam" || kind == "adamw") {
    o = {.kind = kind == "adam" ? OptimizerKind::kAdam : OptimizerKind::kAdamW,
         .learning_rate = 1e-3f,
         .weight_decay = 0.01f,
         .decay_rank1 = false};
  } else if (kind == "nesterov") {
    o.nesterov = true;
  } else if (kind != "sgd") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd, nesterov, adam or adamw, not '", kind, "'"));
  }
  o.max_grad_norm = static_cast<float>(flags.max_grad_norm.value_or(gpt2_adamw ? 1.0 : 0.0));
  o.schedule.warmup_steps = flags.warmup_steps.value_or(gpt2_adamw ? 100 : 0);
  if (decay == "cosine") {
    o.schedule.decay = LrDecay::kCosine;
    o.schedule.total_steps = flags.total_steps;
  } else if (decay == "step") {
    o.schedule.decay = LrDecay::kStep;
    o.schedule.step_size = flags.total_steps;
  } else if (decay != "constant") {
    return absl::InvalidArgumentError(
        absl::StrCat("--schedule must be constant, cosine or step, not '", decay, "'"));
  }
  const bool plain_sgd =
      kind == "sgd" && o.max_grad_norm == 0 && o.schedule.warmup_steps == 0 && decay == "constant";
  if (plain_sgd) return std::nullopt;
  return o;
}

std::string OptimizerText(const std::optional<OptimizerOptions>& optimizer) {
  if (!optimizer.has_value()) return "optimizer=sgd";
  const OptimizerOptions& o = *optimizer;
  // TrainOptions::optimizer always holds one: its plain SGD reads as BenchOptimizer's nullopt.
  if (o.kind == OptimizerKind::kSgd && !o.nesterov && o.max_grad_norm == 0 &&
      o.schedule.warmup_steps == 0 && o.schedule.decay == LrDecay::kConstant) {
    return "optimizer=sgd";
  }
  std::string text = absl::StrFormat("optimizer=%s lr=%g",
                                     o.kind == OptimizerKind::kAdamW  ? "adamw"
                                     : o.kind == OptimizerKind::kAdam ? "adam"
                                     : o.nesterov                     ? "nesterov"
                                                                      : "sgd",
                                     o.learning_rate);
  if (o.kind != OptimizerKind::kSgd) {
    absl::StrAppendFormat(&text, " betas=%g/%g weight_decay=%g decay_rank1=%d", o.beta1, o.beta2,
                          o.weight_decay, o.decay_rank1);
  }
  absl::StrAppendFormat(&text, " max_grad_norm=%g warmup_steps=%d schedule=%s", o.max_grad_norm,
                        o.schedule.warmup_steps,
                        o.schedule.decay == LrDecay::kCosine ? "cosine"
                        : o.schedule.decay == LrDecay::kStep ? "step"
                                                             : "constant");
  if (o.schedule.decay == LrDecay::kCosine) {
    absl::StrAppendFormat(&text, " total_steps=%d", o.schedule.total_steps);
  }
  return text;
}

absl::Status CompareWithTorch(const BenchModelConfig& c, const std::string& precision, bool tf32,
                              int iters, int warmup, double graph_ms) {
  const int64_t input_features = c.input_features > 0 ? c.input_features : c.width;
  std::string script;
  if (c.model == "ensemble") {
    script = absl::StrFormat(
        "torch_ensemble.py --models %d --input-features %d --depth %d "
        "--width %d%s",
        c.ensemble, input_features, c.depth, c.width, tf32 ? " --tf32" : "");
  } else if (c.model == "resnet") {
    script =
        absl::StrFormat("torch_resnet.py --depth %d --image-size %d --layout %s --precision %s",
                        c.depth, c.image_size, c.layout, precision);
  } else if (c.model == "mlp") {
    script = absl::StrFormat("torch_mlp.py --depth %d --width %d%s", c.depth, c.width,
                             tf32 ? " --tf32" : "");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare_torch knows mlp, resnet and ensemble, not ", c.model,
                     " (GPT-2's peers are tools/bench/'s own scripts)"));
  }
  const std::string command =
      absl::StrFormat("python3 tools/bench/%s --batch %d --classes %d --iters %d --warmup %d 2>&1",
                      script, c.batch, c.classes, iters, warmup);
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

}  // namespace reprise::tools
