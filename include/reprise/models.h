// Ready-made models.
#ifndef REPRISE_INCLUDE_REPRISE_MODELS_H_
#define REPRISE_INCLUDE_REPRISE_MODELS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"

namespace reprise::models {

struct MlpConfig {
  int64_t batch = 32;
  int64_t input_features = 256;
  int64_t depth = 8;     // Hidden Linear+ReLU layers.
  int64_t width = 256;   // Features of each hidden layer.
  int64_t classes = 10;  // Outputs of the final Linear.
};

struct Mlp {
  Graph graph;
  Value features;  // Input "features" f32 [batch, input_features].
  Value labels;    // Input "labels" i32 [batch].
  Value logits;    // f32 [batch, classes].
  Value loss;      // Scalar softmax cross-entropy.
};

// A classifier MLP: depth × (Linear(width) + ReLU), then Linear(classes), softmax cross-entropy.
// Layers are named "fc0" ... "fc<depth>".
absl::StatusOr<Mlp> BuildMlp(const MlpConfig& config);

// The values of one MLP added to a graph.
struct MlpValues {
  Value features, labels, logits, loss;
};
// Adds BuildMlp's model to `graph` with every name prefixed by `prefix` ("m3.features",
// "m3.fc0.weight", ..., "m3.loss"). InvalidArgument for a bad config or a name already taken.
absl::StatusOr<MlpValues> AddMlp(Graph& graph, const MlpConfig& config,
                                 absl::string_view prefix = "");

// Builds one model of an ensemble into `graph`, naming everything with `prefix`, and returns
// its loss (a float32 scalar).
using ModelBuilder =
    std::function<absl::StatusOr<Value>(Graph& graph, absl::string_view prefix, int model)>;

// An ensemble of `models` models in one graph: calls `build` with prefix "m<k>." for k = 0, 1,
// ... and returns their losses in model order. The models are separate (their own inputs and
// parameters); the Trainer batches structurally identical ones into one batched GEMM per layer
// (TrainOptions::parallel.batch_ensembles), and so it would if they were built by hand.
// InvalidArgument for models < 1; the builder's errors pass through.
absl::StatusOr<std::vector<Value>> Ensemble(Graph& graph, int models, const ModelBuilder& build);

// losses[0] + losses[1] + ..., added left to right; the last add is named `name`. Training on
// the sum gives each model the gradients of its own loss. InvalidArgument for no losses, or for
// one that is not a float scalar of `graph`.
absl::StatusOr<Value> SumLosses(Graph& graph, absl::Span<const Value> losses,
                                absl::string_view name = "loss");

struct MlpEnsemble {
  Graph graph;
  // Model k's values: inputs "m<k>.features" f32 [batch, input_features] and "m<k>.labels" i32
  // [batch], its logits and its loss "m<k>.loss".
  std::vector<Value> features, labels, logits, losses;
  Value loss;  // "loss", the sum of the models' losses.
};
// `models` MLPs of `config` (Ensemble of AddMlp, SumLosses), each with its own weights.
absl::StatusOr<MlpEnsemble> BuildMlpEnsemble(int models, const MlpConfig& config);

struct ResNetConfig {
  int depth = 50;  // 18, 34 (basic blocks), 50, 101 or 152 (bottleneck blocks).
  int64_t batch = 32;
  int64_t classes = 1000;
  int64_t image_size = 224;  // Square images; at least 32 (five halvings leave 1×1).
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kFloat32;  // float32, or float64 for CPU reference checks.
  // 3, or 4: MLPerf's stem, for images padded with a fourth channel of zeros (as its data
  // pipelines give them: 16-bit NHWC pixels of 8 bytes). conv1.weight then has 4 input channels,
  // the fourth's gradient is zero on such images, and torchvision's 3-channel conv1 does not load.
  int64_t image_channels = 3;
};

struct ResNet {
  Graph graph;
  Value images;  // Input "images" [batch, C, size, size] (NCHW) or [batch, size, size, C] (NHWC),
                 // C = image_channels.
  Value labels;  // Input "labels" i32 [batch].
  Value logits;  // [batch, classes].
  Value loss;    // Scalar softmax cross-entropy.
};

// torchvision's ResNet (v1.5: a bottleneck block strides in its 3×3 convolution), with its names:
// "conv1", "bn1", "layer<i>.<j>.conv<k>", "layer<i>.<j>.bn<k>", "layer<i>.<j>.downsample.0"/".1",
// "fc", so that parameters and running statistics move to and from torchvision.models.resnet<depth>
// by name. Convolutions start as torchvision's do (He, fan-out; uniform with the same variance),
// batch norms with weight 1 and bias 0. InvalidArgument for an unknown depth or too small an image.
absl::StatusOr<ResNet> BuildResNet(const ResNetConfig& config);

// GPT-2 (nanoGPT's model, the 124M one by default): pre-LayerNorm transformer blocks
// x + attn(ln_1(x)), x + mlp(ln_2(x)), a final ln_f, GELU (tanh form) in a 4x MLP, learned
// position embeddings and the output projection tied to the token embedding.
struct Gpt2Config {
  int64_t batch = 16;
  int64_t seq = 1024;            // Tokens per sequence trained on (T), at most max_positions.
  int64_t max_positions = 1024;  // Rows of the position embedding (GPT-2's context).
  int64_t vocab = 50257;
  int64_t layers = 12;
  int64_t heads = 12;      // Must divide width.
  int64_t width = 768;     // C, the residual stream's features.
  double init_std = 0.02;  // Weights' standard deviation (c_proj's: init_std / sqrt(2·layers)).
  // Columns of the logits (the output product's rows): the vocabulary padded with classes that
  // never occur, so that the product's leading dimension keeps tensor-core kernels aligned
  // (50,257 is odd; 50,304 is 393·128). 0: vocab rounded up to a multiple of 128 (Gpt2LogitsWidth);
  // vocab: no padding. The parameters do not change: transformer.wte.weight stays [vocab, C].
  int64_t padded_vocab = 0;
};

// The logits' width for `config`: padded_vocab, or vocab rounded up to a multiple of 128 when it
// is 0. Meaningful for a config BuildGpt2 accepts.
int64_t Gpt2LogitsWidth(const Gpt2Config& config);

struct Gpt2 {
  Graph graph;
  Value tokens;   // Input "tokens" i32 [batch, seq].
  Value targets;  // Input "targets" i32 [batch, seq]: the next token of each position.
  // [batch·seq, Gpt2LogitsWidth(config)], row b·seq + t for token t of sequence b: the first vocab
  // columns are the tokens' logits, the rest (the padding) are 0 and take no part in the loss.
  Value logits;
  Value loss;  // "loss": scalar mean cross-entropy over every position.
};

// The values of one GPT-2 added to a graph.
struct Gpt2Values {
  Value tokens, targets, logits, loss;
};

// GPT-2 with the parameter names and layouts of nanoGPT's (and Hugging Face's GPT2LMHeadModel's)
// state dict, so that SaveWeights / LoadWeights interchange with it through safetensors:
//   transformer.wte.weight [vocab, C]      token embedding, and the output projection (below)
//   transformer.wpe.weight [max_positions, C]
//   transformer.h.<i>.ln_1.weight / .bias [C]
//   transformer.h.<i>.attn.c_attn.weight [3C, C] / .bias [3C]   q, k, v side by side
//   transformer.h.<i>.attn.c_proj.weight [C, C] / .bias [C]
//   transformer.h.<i>.ln_2.weight / .bias [C]
//   transformer.h.<i>.mlp.c_fc.weight [4C, C] / .bias [4C]
//   transformer.h.<i>.mlp.c_proj.weight [C, 4C] / .bias [C]
//   transformer.ln_f.weight / .bias [C]
// Linear weights are [out, in] as torch.nn.Linear's (Hugging Face's Conv1D keeps them transposed,
// [in, out]: transpose those when converting). The logits are the final hidden states times
// transformer.wte.weight transposed: the same parameter the embedding reads, so its gradient is
// the sum of both uses' and there is no lm_head parameter. The product reads the table padded with
// zero rows to Gpt2LogitsWidth(config) (a resize_rows node "lm_head.pad", in the compute dtype), so
// the logits' padding columns are 0, and the loss takes only the first vocab columns as classes
// (their gradient is 0, and the table's gradient is the first vocab rows of the padded one's). A
// torch state dict's lm_head.weight is the same tensor as transformer.wte.weight (nanoGPT ties
// them): drop it when loading here (LoadWeightsOptions::allow_unexpected, the default) and copy wte
// into it when going back. Starts as nanoGPT does, uniform with the same standard deviation (the
// engine has no normal initializer): weights and embeddings init_std, the two c_proj weights
// init_std / sqrt(2·layers), biases 0, layer norms weight 1 and bias 0. The default (124M) has
// 124,439,808 parameters. InvalidArgument naming the field for a size below 1 (or init_std not
// positive), heads not dividing width, seq > max_positions, a vocab beyond int32 token ids, a
// padded_vocab below vocab (other than 0) or beyond int32, or sizes whose tensors' bytes overflow
// int64.
absl::StatusOr<Gpt2> BuildGpt2(const Gpt2Config& config);
// BuildGpt2's model added to `graph` (whose names must be free: "tokens", "targets", "loss",
// "transformer.*", "lm_head"). On any error the graph is left exactly as it was.
absl::StatusOr<Gpt2Values> AddGpt2(Graph& graph, const Gpt2Config& config);

}  // namespace reprise::models

#endif  // REPRISE_INCLUDE_REPRISE_MODELS_H_
