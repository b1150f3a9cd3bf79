// Generating text with a trained GPT-2 (models::BuildGpt2): a decode step that takes one token per
// sequence and gives the next token's logits, with a fixed-size key/value cache per layer, run as
// one captured CUDA graph replay per token on the trainer's parameters (reprise/forward_runner.h);
// and greedy or temperature / top-k sampling from its logits on the host.
//
//   ASSIGN_OR_RETURN(auto generator, models::Gpt2Generator::Create(*trainer, config));
//   ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> text,
//                    generator->Generate({prompt}, /*new_tokens=*/64, {.temperature = 0.8f,
//                                                                       .top_k = 40}));
#ifndef REPRISE_INCLUDE_REPRISE_GPT2_DECODE_H_
#define REPRISE_INCLUDE_REPRISE_GPT2_DECODE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/forward_runner.h"
#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/trainer.h"

namespace reprise::models {

struct Gpt2Decoder {
  Graph graph;
  Value tokens;    // Input "tokens" i32 [batch]: each sequence's token at the current position.
  Value logits;    // f32 [batch, vocab]: the logits of each sequence's next token.
  Value position;  // i32 [1]: the position the next token takes (the counter after this step).
};

// GPT-2's decode step for `config` (its batch is the number of sequences decoded together; seq is
// not used): the blocks of models::BuildGpt2 under the same parameter names, for one token per
// sequence. Each layer keeps state "transformer.h.<i>.attn.k_cache" and ".v_cache"
// [batch, max_positions, C] of `cache_dtype`, which must be the compute dtype of the trainer that
// runs it (TrainOptions::numerics.compute_dtype: the caches hold k and v as its attention reads
// them), and the state "decode.position" i32 [1] counts the tokens so far. A step at position p
// writes the token's keys and values into row p of the caches, adds position embedding p, attends
// over rows 0..p and advances the counter (src/ops/decode_attention.h): its logits are those
// BuildGpt2's graph gives at position p of the same sequence (their first vocab columns: the
// decoder's logits are not padded to Gpt2LogitsWidth). InvalidArgument for a config BuildGpt2
// refuses or a cache_dtype other than float32, bfloat16 or float16.
absl::StatusOr<Gpt2Decoder> BuildGpt2Decoder(const Gpt2Config& config,
                                             DType cache_dtype = DType::kFloat32);

// How the next token is picked from a sequence's logits.
struct SampleOptions {
  float temperature = 1.0f;  // 0: greedy (the first largest logit); else softmax(logits / T).
  int top_k = 0;             // Sample among the k largest logits only; 0: all of them.
  uint64_t seed = 0;         // Generate's draws follow from it.
};

// One token drawn from `logits` as `options` says, with `uniform` a draw from [0, 1): greedy
// ignores it. A logit of -inf is a token never drawn. InvalidArgument for empty logits, a NaN or
// +inf among them, all of them -inf, a negative or NaN temperature, a negative top_k, or a draw
// outside [0, 1).
absl::StatusOr<int32_t> SampleToken(absl::Span<const float> logits, const SampleOptions& options,
                                    double uniform);

// GPT-2's decode step compiled on a trainer (Trainer::CompileForward), and the generation loop.
class Gpt2Generator {
 public:
  // `trainer` trains models::BuildGpt2 of the same widths; the generator reads its parameters in
  // place, so each Generate sees the latest steps, and may outlive it. config.batch sequences are
  // generated at once. Errors of BuildGpt2Decoder and CompileForward.
  static absl::StatusOr<std::unique_ptr<Gpt2Generator>> Create(Trainer& trainer,
                                                               const Gpt2Config& config,
                                                               const ForwardOptions& options = {});

  // Continues each of the config.batch `prompts` by `new_tokens` tokens: the prompts' tokens are
  // fed one by one through the decode step (one replay each), then each sampled token. Returns the
  // new tokens of each sequence. InvalidArgument for a prompt count other than config.batch, an
  // empty prompt, a token outside the vocabulary, new_tokens < 0, or more positions than the
  // cache holds (the longest prompt + new_tokens > max_positions), each before anything runs; the
  // sampler's errors.
  absl::StatusOr<std::vector<std::vector<int32_t>>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, int new_tokens,
      const SampleOptions& sampling);

  ForwardRunner& runner() { return *runner_; }
  const Gpt2Decoder& decoder() const { return decoder_; }

 private:
  Gpt2Generator(Gpt2Config config, Gpt2Decoder decoder, std::unique_ptr<ForwardRunner> runner)
      : config_(config), decoder_(std::move(decoder)), runner_(std::move(runner)) {}
  Gpt2Config config_;
  Gpt2Decoder decoder_;
  std::unique_ptr<ForwardRunner> runner_;
};

}  // namespace reprise::models

#endif  // REPRISE_INCLUDE_REPRISE_GPT2_DECODE_H_
