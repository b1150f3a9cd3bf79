// The models reprise-bench times (MLP, ResNet, an ensemble of MLPs, GPT-2), each with one batch
// of random data for every input, and what a step of it computes (samples, tokens, flops), so
// that the tool itself only times and prints.
#ifndef REPRISE_TOOLS_BENCH_MODELS_H_
#define REPRISE_TOOLS_BENCH_MODELS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/optimizer.h"
#include "reprise/trainer.h"
#include "src/runtime/owners.h"

namespace reprise::tools {

// What to build: reprise-bench's model flags.
struct BenchModelConfig {
  std::string model = "mlp";  // "mlp", "resnet", "ensemble" or "gpt2".
  int64_t batch = 32;         // Samples (gpt2: sequences) per step.
  // mlp, ensemble: hidden layers, their width, input features (0: the width), classes.
  int64_t depth = 8, width = 256, input_features = 0, classes = 10;
  int ensemble = 32;  // ensemble: models.
  // resnet: depth (18, 34, 50, 101 or 152), images and layout ("nchw" or "nhwc"); classes.
  // image_channels 4: MLPerf's stem, the random images padded with a fourth channel of zeros.
  int64_t image_size = 224, image_channels = 3;
  std::string layout = "nchw";
  // gpt2: sequence length, layers, heads, width, vocabulary and the logits' columns
  // (models::Gpt2Config; padded_vocab 0 rounds vocab up to 128); the position table has
  // max(1024, seq) rows.
  int64_t seq = 1024, layers = 12, heads = 12, gpt2_width = 768, vocab = 50257, padded_vocab = 0;
};

// The model's configuration for the table's first line ("gpt2 batch=16 seq=1024 layers=12 ...")
// and for the JSON's "config" object (its model fields, without braces: "\"model\": \"gpt2\",
// ..."). Only the fields the model reads, plus depth, width, image_size, layout and classes for
// the others (tools/bench/report.py reads them).
std::string ModelConfigText(const BenchModelConfig& config);
std::string ModelConfigJson(const BenchModelConfig& config);

// One input's random batch: f32 or i32 by the input's dtype.
struct BenchInput {
  std::string name;
  std::vector<float> f32;
  std::vector<int32_t> i32;
};

struct BenchModel {
  Graph graph;
  Value loss;
  // Every input of the graph with its batch (an ensemble: each model's "m<k>.<input>").
  std::vector<BenchInput> inputs;
  // An ensemble the trainer batches (TrainOptions::parallel.batch_ensembles) also takes its inputs
  // stacked under "m*.<input>": bound whole, one copy each, instead of every model's slice.
  std::vector<BenchInput> stacked_inputs;
  int64_t samples_per_step = 0;
  int64_t tokens_per_step = 0;  // gpt2: batch·seq; 0 for the others.
  int64_t parameters = 0;
  // gpt2: the model flops of one training step (FlopsFormula), for MFU; 0 for the others.
  double flops_per_step = 0;
  int64_t classes = 0;  // What the labels index (gpt2: the vocabulary).
};

// llm.c's model flops of a GPT-2 training step (Kaplan et al. 2020, section 2.1; llm.c's
// gpt2_estimate_mfu): per token 6·N for the forward (2·N) and backward (4·N) products with every
// parameter, N counting the tied embedding once, plus 6·L·T·C for the attention scores and their
// weighted sum. nanoGPT's estimate (PaLM's) counts the attention as 12·L·T·C instead.
double Gpt2FlopsPerStep(int64_t parameters, int64_t layers, int64_t seq, int64_t width,
                        int64_t tokens);
inline constexpr char kGpt2FlopsFormula[] = "(6*N + 6*L*T*C) * tokens (llm.c's)";

// The model of `config` with random data (fixed seeds: the same batch for every trainer of a
// run). InvalidArgument, naming the flag, for an unknown model or layout, and the builders'
// errors.
absl::StatusOr<BenchModel> BuildBenchModel(const BenchModelConfig& config);

// The dense peak of a GPU in TFLOPS at `precision` ("bf16", "fp16", "tf32" or "fp32"), from its
// name (H100 and H200 SXM, A100); 0 for a GPU this table does not know.
double PeakTflops(const std::string& device_name, const std::string& precision);

// Copies every input's batch into the trainer (SetInput).
absl::Status SetBenchInputs(Trainer& trainer, const BenchModel& model);
// `on_device`: binds device copies of the batch (BindInput; a batched ensemble's stacked inputs
// when `stacked`), which the caller keeps alive while the trainer steps, so that each step's input
// copy is a device-to-device one; else SetBenchInputs and no buffers.
absl::StatusOr<std::vector<runtime::DeviceBuffer>> FeedBenchInputs(Trainer& trainer,
                                                                   const BenchModel& model,
                                                                   bool on_device, bool stacked);

// reprise-bench's optimizer flags; nullopt: not given on the command line.
struct BenchOptimizerFlags {
  std::optional<std::string> optimizer;  // sgd, nesterov, adam, adamw.
  std::optional<std::string> schedule;   // constant, cosine, step.
  std::optional<double> max_grad_norm;
  std::optional<int64_t> warmup_steps;
  int64_t total_steps = 10000;
};
// The optimizer `model` trains with: sgd (momentum 0.9, lr 0.01, the default), nesterov, adam
// or adamw (lr 1e-3, weight decay 0.01 but not on rank-1 parameters); for gpt2 unless given
// nanoGPT's AdamW (lr 6e-4, betas 0.9 / 0.95, weight decay 0.1 on 2-D weights only) with
// clipping at 1, 100 warm-up steps and a cosine decay. nullopt for plain SGD, which keeps
// TrainOptions::optimizer's fused paths. InvalidArgument naming the flag for an unknown name.
absl::StatusOr<std::optional<OptimizerOptions>> BenchOptimizer(const std::string& model,
                                                               const BenchOptimizerFlags& flags);

// "optimizer=adamw lr=0.0006 betas=0.9/0.95 weight_decay=0.1 decay_rank1=0 max_grad_norm=1
// warmup_steps=100 schedule=cosine total_steps=10000" (what BenchOptimizer chose), or
// "optimizer=sgd" for plain SGD.
std::string OptimizerText(const std::optional<OptimizerOptions>& optimizer);

// Runs the PyTorch peer of `config` (tools/bench/torch_mlp.py, torch_resnet.py or
// torch_ensemble.py) with python3 and prints each of its modes beside reprise's graph time; the
// script prints "torch <mode> ... median_ms=X p90_ms=Y" per mode. `precision` as PeakTflops's
// (the ResNet script's); `tf32` for the MLP scripts. Unavailable when it gives no timings;
// InvalidArgument for gpt2 (its peers are tools/bench/'s own scripts).
absl::Status CompareWithTorch(const BenchModelConfig& config, const std::string& precision,
                              bool tf32, int iters, int warmup, double graph_ms);

}  // namespace reprise::tools

#endif  // REPRISE_TOOLS_BENCH_MODELS_H_
