// models::BuildGpt2: nanoGPT's GPT-2 from the nn builders, under its state dict's names.
#include "src/api/models_gpt2.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/nn_attention.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/resize_rows.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::models {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Gpt2Config::", field, " ", why));
}

}  // namespace

// Everything about the config that can be wrong, checked before any node is added.
absl::Status CheckGpt2Config(const Gpt2Config& c) {
  const std::pair<absl::string_view, int64_t> sizes[] = {
      {"batch", c.batch}, {"seq", c.seq},       {"max_positions", c.max_positions},
      {"vocab", c.vocab}, {"layers", c.layers}, {"heads", c.heads},
      {"width", c.width}};
  for (const auto& [field, value] : sizes) {
    if (value < 1) return Invalid(field, absl::StrCat("must be at least 1, got ", value));
  }
  if (!(c.init_std > 0) || !std::isfinite(c.init_std)) {
    return Invalid("init_std", absl::StrCat("must be finite and positive, got ", c.init_std));
  }
  // Node ids are int32 and a block adds a few dozen nodes: more layers could never be built.
  constexpr int64_t kMaxLayers = std::numeric_limits<int32_t>::max() / 64;
  if (c.layers > kMaxLayers) {
    return Invalid("layers", absl::StrCat("must be at most ", kMaxLayers,
                                          " (the nodes a graph can "
                                          "hold), got ",
                                          c.layers));
  }
  if (c.width % c.heads != 0) {
    return Invalid("heads", absl::StrCat("(", c.heads, ") must divide width (", c.width, ")"));
  }
  if (c.seq > c.max_positions) {
    return Invalid(
        "seq", absl::StrCat("(", c.seq, ") must be at most max_positions (", c.max_positions, ")"));
  }
  if (c.vocab > std::numeric_limits<int32_t>::max()) {
    return Invalid("vocab", absl::StrCat("(", c.vocab, ") must fit int32 token ids"));
  }
  if (c.padded_vocab != 0 && c.padded_vocab < c.vocab) {
    return Invalid("padded_vocab", absl::StrCat("(", c.padded_vocab,
                                                ") must be 0 or at least vocab (", c.vocab, ")"));
  }
  const int64_t logits_width = Gpt2LogitsWidth(c);  // vocab fits int32: rounding up cannot wrap.
  if (logits_width > std::numeric_limits<int32_t>::max()) {
    return Invalid("padded_vocab",
                   absl::StrCat("(", logits_width, ", vocab ", c.vocab, " padded) must fit int32"));
  }
  // The largest tensors, in float64 bytes (the CPU reference's gradient checks): each must be
  // addressable. Named by the fields that make it.
  const std::pair<absl::string_view, std::vector<int64_t>> tensors[] = {
      {"batch, seq and padded_vocab (the logits)", {c.batch, c.seq, logits_width, 8}},
      {"batch, seq and width (the MLP's hidden values)", {c.batch, c.seq, 4, c.width, 8}},
      {"padded_vocab and width (the padded token embedding)", {logits_width, c.width, 8}},
      {"max_positions and width (the position embedding)", {c.max_positions, c.width, 8}},
      {"layers and width (the blocks' weights)", {c.layers, 12, c.width, c.width, 8}},
  };
  for (const auto& [fields, dims] : tensors) {
    if (!CheckedProduct(dims).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gpt2Config: ", fields, " are too large: their tensor's bytes (",
                       absl::StrJoin(dims, " x "), ") overflow int64"));
    }
  }
  return absl::OkStatus();
}

int64_t Gpt2LogitsWidth(const Gpt2Config& c) {
  constexpr int64_t kAlign = 128;  // Rows of the product a multiple of 128: tensor-core tiles.
  if (c.padded_vocab != 0) return c.padded_vocab;
  return (c.vocab + kAlign - 1) / kAlign * kAlign;
}

// Uniform(-a, a) has standard deviation a / sqrt(3).
Initializer Gpt2Uniform(double std) {
  const double bound = std * std::sqrt(3.0);
  return Initializer::Uniform(-bound, bound);
}

// nn::Linear's nodes ("<name>.matmul", "<name>.bias_add": what the fuse pass folds into a GEMM
// epilogue) with GPT-2's initialisation instead of torch.nn.Linear's.
absl::StatusOr<Value> Gpt2Linear(Graph& g, Value x, int64_t in, int64_t out,
                                 const std::string& name, double weight_std) {
  ASSIGN_OR_RETURN(Value w,
                   g.AddParameter(absl::StrCat(name, ".weight"), {Shape{out, in}, DType::kFloat32},
                                  Gpt2Uniform(weight_std)));
  ASSIGN_OR_RETURN(Value y, g.AddOp1(ops::MatmulOp(), absl::StrCat(name, ".matmul"), {x, w},
                                     {{"transpose_b", true}}));
  ASSIGN_OR_RETURN(Value b, g.AddParameter(absl::StrCat(name, ".bias"),
                                           {Shape{out}, DType::kFloat32}, Initializer::Zeros()));
  return g.AddOp1(ops::BiasAddOp(), absl::StrCat(name, ".bias_add"), {y, b});
}

namespace {

// [batch, seq] int32 ids as the [batch·seq] rows the embedding and the loss index by.
absl::StatusOr<Value> Rows(Graph& g, Value ids, int64_t rows, absl::string_view name) {
  return g.AddOp1(ops::ReshapeOp(), name, {ids}, {{"shape", absl::StrCat(rows)}});
}

// One pre-LayerNorm block on the residual stream x [batch·seq, C].
absl::StatusOr<Value> Block(Graph& g, Value x, const Gpt2Config& c, int64_t i) {
  const std::string h = absl::StrCat("transformer.h.", i, ".");
  const int64_t width = c.width;
  const double proj_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers));
  ASSIGN_OR_RETURN(Value a, nn::LayerNorm(g, x, h + "ln_1"));
  ASSIGN_OR_RETURN(a, Gpt2Linear(g, a, width, 3 * width, h + "attn.c_attn", c.init_std));
  ASSIGN_OR_RETURN(a, nn::CausalAttention(g, a, c.heads, h + "attn", c.seq));
  ASSIGN_OR_RETURN(a, Gpt2Linear(g, a, width, width, h + "attn.c_proj", proj_std));
  ASSIGN_OR_RETURN(x, nn::Add(g, x, a, h + "attn.residual"));
  ASSIGN_OR_RETURN(Value m, nn::LayerNorm(g, x, h + "ln_2"));
  ASSIGN_OR_RETURN(m, Gpt2Linear(g, m, width, 4 * width, h + "mlp.c_fc", c.init_std));
  ASSIGN_OR_RETURN(m, nn::Gelu(g, m, h + "mlp.gelu"));
  ASSIGN_OR_RETURN(m, Gpt2Linear(g, m, 4 * width, width, h + "mlp.c_proj", proj_std));
  return nn::Add(g, x, m, h + "mlp.residual");
}

absl::StatusOr<Gpt2Values> AddGpt2Steps(Graph& g, const Gpt2Config& c, bool tie_output) {
  RETURN_IF_ERROR(CheckGpt2Config(c));
  const int64_t rows = c.batch * c.seq;
  Gpt2Values v;
  ASSIGN_OR_RETURN(v.tokens, g.AddInput("tokens", {Shape{c.batch, c.seq}, DType::kInt32}));
  ASSIGN_OR_RETURN(v.targets, g.AddInput("targets", {Shape{c.batch, c.seq}, DType::kInt32}));
  ASSIGN_OR_RETURN(Value ids, Rows(g, v.tokens, rows, "tokens.rows"));
  ASSIGN_OR_RETURN(Value x, nn::Embedding(g, ids, c.vocab, c.width, "transformer.wte", c.init_std));
  ASSIGN_OR_RETURN(const int32_t wte_node, g.FindNode("transformer.wte.weight"));
  Value head{wte_node, 0};
  ASSIGN_OR_RETURN(
      x, nn::PositionEmbedding(g, x, c.max_positions, c.seq, "transformer.wpe", c.init_std));
  for (int64_t i = 0; i < c.layers; ++i) {
    ASSIGN_OR_RETURN(x, Block(g, x, c, i));
  }
  ASSIGN_OR_RETURN(x, nn::LayerNorm(g, x, "transformer.ln_f"));
  // Weight tying: the output projection reads the embedding's own table, [vocab, C] as a
  // Linear's [out, in] weight, so autodiff sums the two uses' gradients into one.
  if (!tie_output) {
    ASSIGN_OR_RETURN(
        head, g.AddParameter("lm_head.weight", {Shape{c.vocab, c.width}}, Gpt2Uniform(c.init_std)));
  }
  // The product reads the table padded with zero rows (its gradient: the first vocab rows of the
  // padded one's), and the loss leaves the padding columns out.
  const int64_t logits_width = Gpt2LogitsWidth(c);
  Attrs loss_attrs;
  if (logits_width > c.vocab) {
    ASSIGN_OR_RETURN(
        head, g.AddOp1(ops::ResizeRowsOp(), "lm_head.pad", {head}, {{"rows", logits_width}}));
    loss_attrs[ops::kLossClassesAttr] = c.vocab;
  }
  ASSIGN_OR_RETURN(v.logits,
                   g.AddOp1(ops::MatmulOp(), "lm_head", {x, head}, {{"transpose_b", true}}));
  ASSIGN_OR_RETURN(Value targets, Rows(g, v.targets, rows, "targets.rows"));
  ASSIGN_OR_RETURN(v.loss, g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {v.logits, targets},
                                    std::move(loss_attrs)));
  return v;
}

}  // namespace

absl::StatusOr<Gpt2Values> AddGpt2Model(Graph& graph, const Gpt2Config& config, bool tie_output) {
  return Transactional(graph, [&] { return AddGpt2Steps(graph, config, tie_output); });
}

absl::StatusOr<Gpt2Values> AddGpt2(Graph& graph, const Gpt2Config& config) {
  return AddGpt2Model(graph, config, /*tie_output=*/true);
}

absl::StatusOr<Gpt2> BuildGpt2(const Gpt2Config& config) {
  Gpt2 model;
  ASSIGN_OR_RETURN(const Gpt2Values v, AddGpt2(model.graph, config));
  model.tokens = v.tokens;
  model.targets = v.targets;
  model.logits = v.logits;
  model.loss = v.loss;
  return model;
}

OptimizerOptions Gpt2AdamW(float learning_rate) {
  return {.kind = OptimizerKind::kAdamW,
          .learning_rate = learning_rate,
          .beta1 = 0.9f,
          .beta2 = 0.95f,
          .weight_decay = 0.1f,
          .decay_rank1 = false,
          .max_grad_norm = 1.0f};
}

}  // namespace reprise::models
