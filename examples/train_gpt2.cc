// train_gpt2: GPT-2's main job. Trains models::BuildGpt2 on llm.c-format token shards
// (tools/data/build_shards.py, docs/data.md) with the whole step (forward, backward, AdamW with
// clipping, warm-up + cosine schedule) captured in one CUDA graph; prints one progress line per
// --print_every steps (loss, tokens/s, MFU, ETA); evaluates the validation loss every
// --eval_every steps through a captured forward-only graph on the trainer's weights
// (Trainer::CompileForward); saves a checkpoint; and generates text from a prompt through the
// captured decode step with a key/value cache (models::Gpt2Generator), printing token ids that
// tools/data/decode_tokens.py turns into text. --save_initial, --loss_log and --batch_log record
// what another trainer needs to repeat the run (examples/support/gpt2_run_log.h;
// tools/device/gpt2_loss_compare.sh trains PyTorch on them and compares the losses).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "examples/support/gpt2_run_log.h"
#include "reprise/gpt2_decode.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(std::string, data_dir, "data/shakespeare",
          "directory of token shards: *_train_*.bin for training, *_val_*.bin for validation");
ABSL_FLAG(bool, small, false,
          "a small GPT-2 for a quick run: 4 layers, 4 heads, 256 wide, context 256 (the default "
          "is GPT-2 124M: 12 layers, 12 heads, 768 wide, context 1024)");
ABSL_FLAG(int, vocab, 50257, "vocabulary (50257: GPT-2's BPE; 257: build_shards' byte tokens)");
ABSL_FLAG(int, batch, 16, "sequences per step (B)");
ABSL_FLAG(int, seq, 0,
          "tokens per sequence (T); 0: the model's context (1024, or 256 with --small)");
ABSL_FLAG(int, steps, 200, "training steps");
ABSL_FLAG(float, lr, 6e-4f, "peak learning rate (AdamW, betas 0.9/0.95, warm-up then cosine)");
ABSL_FLAG(int, warmup, 20, "warm-up steps");
ABSL_FLAG(float, weight_decay, 0.1f, "AdamW weight decay (2-D weights only)");
ABSL_FLAG(std::string, dtype, "bf16", "compute dtype: bf16 or f32");
ABSL_FLAG(int, print_every, 10, "print a progress line every N steps");
ABSL_FLAG(int, eval_every, 50, "evaluate the validation loss every N steps (0: only at the end)");
ABSL_FLAG(int, eval_batches, 8, "validation batches per evaluation (at most what the shards hold)");
ABSL_FLAG(std::string, checkpoint, "train_gpt2.ckpt",
          "where the final checkpoint goes (Trainer::SaveCheckpoint); empty: none");
ABSL_FLAG(std::string, prompt, "50256",
          "comma-separated token ids to continue (50256 is GPT-2's <|endoftext|>; "
          "tools/data/decode_tokens.py --encode 'text' prints a text's ids)");
ABSL_FLAG(int, samples, 2, "sequences to generate at the end (0: none)");
ABSL_FLAG(int, generate_tokens, 64, "tokens to generate per sequence");
ABSL_FLAG(float, temperature, 0.8f, "sampling temperature (0: greedy)");
ABSL_FLAG(int, top_k, 40, "sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, peak_tflops, 989.0, "the GPU's dense bf16 peak for MFU (989: H100 and H200 SXM)");
ABSL_FLAG(bool, measure_matmul, true,
          "choose each cuBLASLt product's algorithm by timing its candidates at the first run and "
          "keep the choice in the kernel cache's folder for later runs "
          "(TrainOptions::kernels.measure_matmul_algorithms: GPT-2 124M at B=16 1.3% faster, the "
          "first start 1.8 s longer); the GELU layers' forward products raced between cuDNN and "
          "cuBLASLt the same way");
ABSL_FLAG(uint64_t, seed, 1337, "seed of the weights, the batch order and the sampling");
ABSL_FLAG(std::string, save_initial, "",
          "write the initial weights here before the first step (safetensors, PyTorch's state "
          "dict names: Trainer::SaveWeights with torch_compatible); empty: none");
ABSL_FLAG(std::string, loss_log, "",
          "write the run's settings, every step's training loss and the validation losses here "
          "(text; examples/support/gpt2_run_log.h); empty: none. Reads the loss after every step");
ABSL_FLAG(std::string, batch_log, "",
          "write every batch's tokens here, in order (binary: per step B windows of T + 1 "
          "uint16); empty: none");

namespace {

constexpr reprise::cli::Program kProgram = {
    "train_gpt2",
    "[--data_dir DIR] [--small] [--batch N] [--seq N] [--steps N] [--lr X] ...\n"
    "  Trains GPT-2 on token shards with the whole step captured in a CUDA graph, evaluates,\n"
    "  checkpoints and generates (needs an NVIDIA GPU).",
    __FILE__};

namespace models = reprise::models;

// The shards in `dir` whose names hold `part` ("_train_", "_val_"), sorted.
absl::StatusOr<std::vector<std::string>> Shards(const std::string& dir, absl::string_view part) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("--data_dir '", dir,
                     "' is not a directory; build the shards first: pip install --no-deps "
                     "-r tools/data/requirements.txt && python3 tools/data/build_shards.py --out ",
                     dir, " (docs/data.md)"));
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StrContains(name, part) && absl::EndsWith(name, ".bin")) {
      files.push_back(entry.path().string());
    }
  }
  if (error) return absl::InternalError(absl::StrCat("reading '", dir, "': ", error.message()));
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("--data_dir '", dir, "' holds no *", part,
                     "*.bin shard (tools/data/build_shards.py writes them)"));
  }
  return files;
}

models::Gpt2Config ConfigFromFlags() {
  models::Gpt2Config c;
  if (absl::GetFlag(FLAGS_small)) {
    c.layers = 4;
    c.heads = 4;
    c.width = 256;
    c.max_positions = 256;
  }
  c.vocab = absl::GetFlag(FLAGS_vocab);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.seq = absl::GetFlag(FLAGS_seq) > 0 ? absl::GetFlag(FLAGS_seq) : c.max_positions;
  return c;
}

// Model FLOPs per token of a training step: 6 per parameter (forward 2, backward 4) and the
// causal attention's scores and weighted sums, 6·L·C·T (half of 12·L·C·T: the masked half of each
// product is not computed).
double FlopsPerToken(int64_t parameters, const models::Gpt2Config& c) {
  return 6.0 * static_cast<double>(parameters) +
         6.0 * static_cast<double>(c.layers * c.width * c.seq);
}

absl::StatusOr<float> Evaluate(reprise::ForwardRunner& runner, const models::Gpt2& eval,
                               reprise::data::SequentialTokenReader& reader, int64_t batches,
                               int64_t tokens_per_batch) {
  std::vector<int32_t> tokens(tokens_per_batch), targets(tokens_per_batch);
  reader.Rewind();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    RETURN_IF_ERROR(reader.Next(absl::MakeSpan(tokens), absl::MakeSpan(targets)));
    RETURN_IF_ERROR(runner.SetInput("tokens", tokens));
    RETURN_IF_ERROR(runner.SetInput("targets", targets));
    RETURN_IF_ERROR(runner.Run());
    ASSIGN_OR_RETURN(std::vector<float> loss, runner.Read(eval.loss));
    sum += loss[0];
  }
  return static_cast<float>(sum / static_cast<double>(batches));
}

// The settings another trainer needs to repeat the run, as the loss log's config lines.
absl::Status LogConfig(reprise::examples::Gpt2RunLog& log, const models::Gpt2Config& c,
                       const reprise::OptimizerOptions& o, int64_t eval_batches,
                       const std::vector<std::string>& train_files,
                       const std::vector<std::string>& val_files) {
  const std::vector<std::pair<std::string, std::string>> config = {
      {"layers", absl::StrCat(c.layers)},
      {"heads", absl::StrCat(c.heads)},
      {"width", absl::StrCat(c.width)},
      {"vocab", absl::StrCat(c.vocab)},
      {"max_positions", absl::StrCat(c.max_positions)},
      {"logits_width", absl::StrCat(models::Gpt2LogitsWidth(c))},
      {"batch", absl::StrCat(c.batch)},
      {"seq", absl::StrCat(c.seq)},
      {"steps", absl::StrCat(absl::GetFlag(FLAGS_steps))},
      {"dtype", absl::GetFlag(FLAGS_dtype)},
      {"allow_tf32", "0"},
      {"optimizer", "adamw"},
      {"lr", absl::StrFormat("%.9g", o.learning_rate)},
      {"beta1", absl::StrFormat("%.9g", o.beta1)},
      {"beta2", absl::StrFormat("%.9g", o.beta2)},
      {"eps", absl::StrFormat("%.9g", o.epsilon)},
      {"weight_decay", absl::StrFormat("%.9g", o.weight_decay)},
      {"decay_rank1", o.decay_rank1 ? "1" : "0"},
      {"max_grad_norm", absl::StrFormat("%.9g", o.max_grad_norm)},
      {"warmup", absl::StrCat(o.schedule.warmup_steps)},
      {"decay", "cosine"},
      {"total_steps", absl::StrCat(o.schedule.total_steps)},
      {"min_lr_factor", absl::StrFormat("%.9g", o.schedule.min_lr_factor)},
      {"seed", absl::StrCat(absl::GetFlag(FLAGS_seed))},
      {"eval_every", absl::StrCat(absl::GetFlag(FLAGS_eval_every))},
      {"eval_batches", absl::StrCat(eval_batches)},
      {"train_shards", absl::StrJoin(train_files, ",")},
      {"val_shards", absl::StrJoin(val_files, ",")}};
  for (const auto& [key, value] : config) RETURN_IF_ERROR(log.Config(key, value));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ParsePrompt(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt: '", piece, "' is not a token id (comma-separated integers)"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt holds no token id");
  return ids;
}

absl::Status Train() {
  const models::Gpt2Config config = ConfigFromFlags();
  ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, ParsePrompt(absl::GetFlag(FLAGS_prompt)));
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  ASSIGN_OR_RETURN(const std::vector<std::string> train_files, Shards(dir, "_train_"));
  ASSIGN_OR_RETURN(const std::vector<std::string> val_files, Shards(dir, "_val_"));
  const reprise::data::TokenLoaderOptions loader_options{
      .shards = train_files,
      .batch_size = static_cast<int>(config.batch),
      .sequence_length = static_cast<int>(config.seq),
      .vocab_size = static_cast<int>(config.vocab),
      .seed = absl::GetFlag(FLAGS_seed)};
  ASSIGN_OR_RETURN(auto loader, reprise::data::TokenLoader::Create(loader_options));
  reprise::data::TokenLoaderOptions val_options = loader_options;
  val_options.shards = val_files;
  ASSIGN_OR_RETURN(auto val_reader, reprise::data::SequentialTokenReader::Create(val_options));
  const int64_t eval_batches =
      std::min<int64_t>(absl::GetFlag(FLAGS_eval_batches), val_reader->num_batches());
  if (eval_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the validation shards hold no whole batch of ",
                                                   config.batch, " x ", config.seq + 1,
                                                   " tokens: lower --batch or --seq"));
  }

  auto devices = reprise::runtime::VisibleDeviceCount();
  if (!devices.ok() || *devices == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device visible; train_gpt2 needs an NVIDIA GPU (compute capability 8.0 or newer)");
  }
  ASSIGN_OR_RETURN(models::Gpt2 model, models::BuildGpt2(config));
  const int steps = absl::GetFlag(FLAGS_steps);
  reprise::TrainOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.numerics.compute_dtype =
      absl::GetFlag(FLAGS_dtype) == "f32" ? reprise::DType::kFloat32 : reprise::DType::kBFloat16;
  options.optimizer = reprise::OptimizerOptions{
      .kind = reprise::OptimizerKind::kAdamW,
      .learning_rate = absl::GetFlag(FLAGS_lr),
      .beta1 = 0.9f,
      .beta2 = 0.95f,
      .weight_decay = absl::GetFlag(FLAGS_weight_decay),
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      // A run shorter than the warm-up still decays: the cosine needs a step after the warm-up.
      .schedule = {.warmup_steps = std::min(absl::GetFlag(FLAGS_warmup), steps - 1),
                   .decay = reprise::LrDecay::kCosine,
                   .total_steps = steps,
                   .min_lr_factor = 0.1f}};
  options.kernels.measure_matmul_algorithms = absl::GetFlag(FLAGS_measure_matmul);
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  ASSIGN_OR_RETURN(reprise::examples::Gpt2RunLog log,
                   reprise::examples::Gpt2RunLog::Open(absl::GetFlag(FLAGS_loss_log),
                                                       absl::GetFlag(FLAGS_batch_log)));
  RETURN_IF_ERROR(LogConfig(log, config, options.optimizer, eval_batches, train_files, val_files));
  const absl::Time created = absl::Now();
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  const absl::Time forward_start = absl::Now();
  ASSIGN_OR_RETURN(models::Gpt2 eval, models::BuildGpt2(config));
  ASSIGN_OR_RETURN(auto evaluator, trainer->CompileForward(eval.graph, {eval.loss}));
  const absl::Time ready = absl::Now();
  const reprise::TrainerStats stats = trainer->stats();
  const int64_t parameters = stats.parameter_bytes / 4;
  std::printf(
      "GPT-2 %lld layers, %lld heads, %lld wide, vocab %lld: %lld parameters; B=%lld T=%lld %s; "
      "%zu train / %zu val shards; ready in %.1f s (trainer: %s; evaluation forward %.0f ms)\n",
      static_cast<long long>(config.layers), static_cast<long long>(config.heads),
      static_cast<long long>(config.width), static_cast<long long>(config.vocab),
      static_cast<long long>(parameters), static_cast<long long>(config.batch),
      static_cast<long long>(config.seq), absl::GetFlag(FLAGS_dtype).c_str(), train_files.size(),
      val_files.size(), absl::ToDoubleSeconds(ready - created), stats.CreateBreakdown().c_str(),
      absl::ToDoubleMilliseconds(ready - forward_start));
  if (const std::string path = absl::GetFlag(FLAGS_save_initial); !path.empty()) {
    RETURN_IF_ERROR(trainer->SaveWeights(path, {.torch_compatible = true}));
    std::printf("initial weights: %s\n", path.c_str());
  }

  const int64_t tokens_per_step = config.batch * config.seq;
  const double flops_per_step = FlopsPerToken(parameters, config) * tokens_per_step;
  const int print_every = absl::GetFlag(FLAGS_print_every);
  const int eval_every = absl::GetFlag(FLAGS_eval_every);
  absl::Time window_start = absl::Now(), train_start = window_start;
  int window_steps = 0;
  for (int step = 1; step <= steps; ++step) {
    ASSIGN_OR_RETURN(absl::Span<int32_t> tokens, trainer->InputBufferInt32("tokens"));
    ASSIGN_OR_RETURN(absl::Span<int32_t> targets, trainer->InputBufferInt32("targets"));
    RETURN_IF_ERROR(loader->Next(tokens, targets));
    RETURN_IF_ERROR(log.Batch(tokens, targets, config.batch, config.seq));
    RETURN_IF_ERROR(trainer->Step());
    ++window_steps;
    if (log.logs_losses()) {
      ASSIGN_OR_RETURN(const float loss, trainer->Loss());  // Waits for the step.
      RETURN_IF_ERROR(log.Train(step, loss));
    }
    if (step % print_every == 0 || step == steps) {
      ASSIGN_OR_RETURN(const float loss, trainer->Loss());  // Waits for the step.
      const absl::Time now = absl::Now();
      const double seconds = absl::ToDoubleSeconds(now - window_start);
      const double step_s = seconds / window_steps;
      const double eta = step_s * (steps - step);
      std::printf(
          "step %5d/%d  loss %.4f  %6.1f ms/step  %8.0f tokens/s  MFU %4.1f%%  ETA %.0f s\n", step,
          steps, loss, 1e3 * step_s, tokens_per_step / step_s,
          100.0 * flops_per_step / step_s / (absl::GetFlag(FLAGS_peak_tflops) * 1e12), eta);
      std::fflush(stdout);
      window_start = now;
      window_steps = 0;
    }
    if ((eval_every > 0 && step % eval_every == 0) || step == steps) {
      ASSIGN_OR_RETURN(const float val,
                       Evaluate(*evaluator, eval, *val_reader, eval_batches, tokens_per_step));
      std::printf("step %5d  validation loss %.4f (%lld batches)\n", step, val,
                  static_cast<long long>(eval_batches));
      RETURN_IF_ERROR(log.Validation(step, val));
      window_start = absl::Now();  // Evaluation time is not training time.
    }
  }
  std::printf("trained %d steps in %.1f s\n", steps,
              absl::ToDoubleSeconds(absl::Now() - train_start));
  RETURN_IF_ERROR(log.Close());
  if (const std::string path = absl::GetFlag(FLAGS_checkpoint); !path.empty()) {
    RETURN_IF_ERROR(trainer->SaveCheckpoint(path));
    std::printf("checkpoint: %s\n", path.c_str());
  }
  if (const int samples = absl::GetFlag(FLAGS_samples); samples > 0) {
    models::Gpt2Config decode = config;
    decode.batch = samples;
    ASSIGN_OR_RETURN(auto generator, models::Gpt2Generator::Create(*trainer, decode));
    const std::vector<std::vector<int32_t>> prompts(samples, prompt);
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(auto generated,
                     generator->Generate(prompts, absl::GetFlag(FLAGS_generate_tokens),
                                         {.temperature = absl::GetFlag(FLAGS_temperature),
                                          .top_k = absl::GetFlag(FLAGS_top_k),
                                          .seed = absl::GetFlag(FLAGS_seed)}));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const reprise::ForwardStats decode_stats = generator->runner().stats();
    std::printf(
        "generated %d x %d tokens in %.3f s (%lld decode replays, %lld graph nodes each); "
        "tools/data/decode_tokens.py turns these lines into text:\n",
        samples, absl::GetFlag(FLAGS_generate_tokens), seconds,
        static_cast<long long>(decode_stats.graph_replays),
        static_cast<long long>(decode_stats.graph_nodes));
    for (int s = 0; s < samples; ++s) {
      std::printf("sample %d: %s\n", s,
                  absl::StrJoin(prompt, " ")
                      .append(" | ")
                      .append(absl::StrJoin(generated[s], " "))
                      .c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  cli::CheckFlags(kProgram,
                  {cli::InRange("vocab", absl::GetFlag(FLAGS_vocab), 2, 65536),
                   cli::AtLeast("batch", absl::GetFlag(FLAGS_batch), 1),
                   cli::AtLeast("seq", absl::GetFlag(FLAGS_seq), 0),
                   cli::AtLeast("steps", absl::GetFlag(FLAGS_steps), 1),
                   cli::NonNegative("lr", absl::GetFlag(FLAGS_lr)),
                   cli::AtLeast("warmup", absl::GetFlag(FLAGS_warmup), 0),
                   cli::NonNegative("weight_decay", absl::GetFlag(FLAGS_weight_decay)),
                   cli::OneOf("dtype", absl::GetFlag(FLAGS_dtype), {"bf16", "f32"}),
                   cli::AtLeast("print_every", absl::GetFlag(FLAGS_print_every), 1),
                   cli::AtLeast("eval_every", absl::GetFlag(FLAGS_eval_every), 0),
                   cli::AtLeast("eval_batches", absl::GetFlag(FLAGS_eval_batches), 1),
                   cli::AtLeast("samples", absl::GetFlag(FLAGS_samples), 0),
                   cli::AtLeast("generate_tokens", absl::GetFlag(FLAGS_generate_tokens), 1),
                   cli::NonNegative("temperature", absl::GetFlag(FLAGS_temperature)),
                   cli::AtLeast("top_k", absl::GetFlag(FLAGS_top_k), 0),
                   cli::NonNegative("peak_tflops", absl::GetFlag(FLAGS_peak_tflops))});
  // The shards are checked before the device, so that a missing directory is named first.
  return cli::Finish(kProgram, Train());
}
