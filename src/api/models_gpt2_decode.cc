// models::BuildGpt2Decoder and Gpt2Generator (reprise/gpt2_decode.h): GPT-2's decode step with a
// key/value cache, built from the same layers as models::BuildGpt2 under the same names.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reprise/gpt2_decode.h"
#include "reprise/nn.h"
#include "src/api/models_gpt2.h"
#include "src/ops/decode_attention.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::models {
namespace {

constexpr char kPosition[] = "decode.position";

// One pre-LayerNorm block on x [batch, C] for the token at the position counter; adds the ids of
// the nodes that read the counter to `readers`.
absl::StatusOr<Value> Block(Graph& g, Value x, Value position, const Gpt2Config& c, int64_t i,
                            DType cache_dtype, std::vector<int32_t>& readers) {
  const std::string h = absl::StrCat("transformer.h.", i, ".");
  const int64_t width = c.width;
  const double proj_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers));
  const TensorSpec cache{Shape{c.batch, c.max_positions, width}, cache_dtype};
  ASSIGN_OR_RETURN(Value keys, g.AddState(h + "attn.k_cache", cache, Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value values, g.AddState(h + "attn.v_cache", cache, Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value a, nn::LayerNorm(g, x, h + "ln_1"));
  ASSIGN_OR_RETURN(a, Gpt2Linear(g, a, width, 3 * width, h + "attn.c_attn", c.init_std));
  ASSIGN_OR_RETURN(a, g.AddOp1(ops::DecodeAttentionOp(), h + "attn", {a, keys, values, position},
                               {{"heads", c.heads}}));
  readers.push_back(a.node);
  ASSIGN_OR_RETURN(a, Gpt2Linear(g, a, width, width, h + "attn.c_proj", proj_std));
  ASSIGN_OR_RETURN(x, nn::Add(g, x, a, h + "attn.residual"));
  ASSIGN_OR_RETURN(Value m, nn::LayerNorm(g, x, h + "ln_2"));
  ASSIGN_OR_RETURN(m, Gpt2Linear(g, m, width, 4 * width, h + "mlp.c_fc", c.init_std));
  ASSIGN_OR_RETURN(m, nn::Gelu(g, m, h + "mlp.gelu"));
  ASSIGN_OR_RETURN(m, Gpt2Linear(g, m, 4 * width, width, h + "mlp.c_proj", proj_std));
  return nn::Add(g, x, m, h + "mlp.residual");
}

absl::Status CheckDecoderConfig(const Gpt2Config& c, DType cache_dtype) {
  if (cache_dtype != DType::kFloat32 && !IsLowPrecision(cache_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildGpt2Decoder: cache_dtype must be f32, bf16 or f16, got ", DTypeName(cache_dtype)));
  }
  // BuildGpt2's own checks, on a config whose seq it accepts (the decoder reads one token).
  Gpt2Config one = c;
  one.seq = 1;
  return CheckGpt2Config(one);
}

absl::StatusOr<Gpt2Decoder> BuildDecoder(const Gpt2Config& c, DType cache_dtype) {
  RETURN_IF_ERROR(CheckDecoderConfig(c, cache_dtype));
  Gpt2Decoder d;
  Graph& g = d.graph;
  ASSIGN_OR_RETURN(d.tokens, g.AddInput("tokens", {Shape{c.batch}, DType::kInt32}));
  ASSIGN_OR_RETURN(Value position,
                   g.AddState(kPosition, {Shape{1}, DType::kInt32}, Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value x,
                   nn::Embedding(g, d.tokens, c.vocab, c.width, "transformer.wte", c.init_std));
  ASSIGN_OR_RETURN(const int32_t wte, g.FindNode("transformer.wte.weight"));
  ASSIGN_OR_RETURN(Value wpe, g.AddParameter("transformer.wpe.weight",
                                             {Shape{c.max_positions, c.width}, DType::kFloat32},
                                             Gpt2Uniform(c.init_std)));
  std::vector<int32_t> readers;
  ASSIGN_OR_RETURN(x, g.AddOp1(ops::AddPositionAtOp(), "transformer.wpe", {x, wpe, position}));
  readers.push_back(x.node);
  for (int64_t i = 0; i < c.layers; ++i) {
    ASSIGN_OR_RETURN(x, Block(g, x, position, c, i, cache_dtype, readers));
  }
  ASSIGN_OR_RETURN(x, nn::LayerNorm(g, x, "transformer.ln_f"));
  ASSIGN_OR_RETURN(
      d.logits, g.AddOp1(ops::MatmulOp(), "lm_head", {x, Value{wte, 0}}, {{"transpose_b", true}}));
  // The counter moves on once every reader of this step's position has run.
  ASSIGN_OR_RETURN(d.position, g.AddOp1(ops::AdvancePositionOp(), "decode.advance", {position}));
  for (int32_t reader : readers) RETURN_IF_ERROR(g.AddControlEdge(reader, d.position.node));
  return d;
}

}  // namespace

absl::StatusOr<Gpt2Decoder> BuildGpt2Decoder(const Gpt2Config& config, DType cache_dtype) {
  return BuildDecoder(config, cache_dtype);
}

absl::StatusOr<int32_t> SampleToken(absl::Span<const float> logits, const SampleOptions& options,
                                    double uniform) {
  if (logits.empty()) return absl::InvalidArgumentError("SampleToken: no logits");
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SampleOptions::temperature must be finite and >= 0, got ", options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleOptions::top_k must be >= 0, got ", options.top_k));
  }
  if (!(uniform >= 0 && uniform < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleToken: the draw must be in [0, 1), got ", uniform));
  }
  // -inf is a masked token; NaN and +inf leave no softmax to draw from.
  bool finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SampleToken: logit ", i, " is ", std::isnan(logits[i]) ? "NaN" : "+inf"));
    }
    finite = finite || std::isfinite(logits[i]);
  }
  if (!finite) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleToken: every one of the ", logits.size(), " logits is -inf"));
  }
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  // Largest first, ties by the lower id, so that greedy picks the first largest logit.
  auto larger = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const size_t k = options.top_k == 0 ? order.size()
                                      : std::min(order.size(), static_cast<size_t>(options.top_k));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), larger);
  if (options.temperature == 0) return order[0];
  std::vector<double> weight(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    weight[i] =
        std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / options.temperature);
    total += weight[i];
  }
  double target = uniform * total;
  size_t last = 0;  // The last token of weight above 0 (order[0]'s is 1).
  for (size_t i = 0; i < k; ++i) {
    if (weight[i] == 0) continue;  // Masked (-inf), or beyond exp's range: never drawn.
    if (target < weight[i]) return order[i];
    target -= weight[i];
    last = i;
  }
  return order[last];  // Rounding left the draw past the last weight.
}

absl::StatusOr<std::unique_ptr<Gpt2Generator>> Gpt2Generator::Create(
    Trainer& trainer, const Gpt2Config& config, const ForwardOptions& options) {
  ASSIGN_OR_RETURN(Gpt2Decoder decoder,
                   BuildGpt2Decoder(config, trainer.options().numerics.compute_dtype));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ForwardRunner> runner,
      trainer.CompileForward(decoder.graph, {decoder.logits, decoder.position}, options));
  return std::unique_ptr<Gpt2Generator>(
      new Gpt2Generator(config, std::move(decoder), std::move(runner)));
}

absl::StatusOr<std::vector<std::vector<int32_t>>> Gpt2Generator::Generate(
    const std::vector<std::vector<int32_t>>& prompts, int new_tokens,
    const SampleOptions& sampling) {
  const int64_t batch = config_.batch;
  if (static_cast<int64_t>(prompts.size()) != batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generate: ", prompts.size(), " prompts for a decoder of batch ", batch));
  }
  if (new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generate: new_tokens must be >= 0, got ", new_tokens));
  }
  size_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    if (prompts[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Generate: prompt ", b, " is empty"));
    }
    for (int32_t token : prompts[b]) {
      if (token < 0 || token >= config_.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("Generate: prompt ", b, " has token ", token,
                                                       " outside [0, ", config_.vocab, ")"));
      }
    }
    longest = std::max(longest, prompts[b].size());
  }
  // The last step feeds the last new token's predecessor: positions 0 .. longest + new - 2.
  const int64_t positions = static_cast<int64_t>(longest) + new_tokens - 1;
  if (positions > config_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Generate: the longest prompt (", longest, " tokens) and ", new_tokens, " new tokens need ",
        positions, " positions; the cache holds ", config_.max_positions));
  }
  std::vector<std::vector<int32_t>> generated(batch);
  if (new_tokens == 0) return generated;
  RETURN_IF_ERROR(runner_->ResetState());
  std::mt19937_64 rng(sampling.seed);
  // 53 random bits: exactly [0, 1), and the same draws with every standard library
  // (std::uniform_real_distribution's are implementation-defined and may round up to 1).
  auto uniform = [](std::mt19937_64& r) { return static_cast<double>(r() >> 11) * 0x1.0p-53; };
  std::vector<int32_t> tokens(batch);
  for (int64_t b = 0; b < batch; ++b) tokens[b] = prompts[b][0];
  for (int64_t step = 0; step < positions; ++step) {
    RETURN_IF_ERROR(runner_->SetInput("tokens", tokens));
    RETURN_IF_ERROR(runner_->Run());
    ASSIGN_OR_RETURN(std::vector<float> logits, runner_->Read(decoder_.logits));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t next = step + 1;  // The position whose token this step predicts.
      if (next < static_cast<int64_t>(prompts[b].size())) {
        tokens[b] = prompts[b][next];  // Still reading the prompt.
        continue;
      }
      if (static_cast<int>(generated[b].size()) == new_tokens) continue;  // Done; idles.
      ASSIGN_OR_RETURN(tokens[b], SampleToken(absl::MakeConstSpan(logits).subspan(b * config_.vocab,
                                                                                  config_.vocab),
                                              sampling, uniform(rng)));
      generated[b].push_back(tokens[b]);
    }
  }
  return generated;
}

}  // namespace reprise::models
