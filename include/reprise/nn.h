// Layer builders. Each adds its ops (and parameters) to a Graph and returns the output value, or
// InvalidArgument naming the layer and the shapes that do not fit. A builder that fails leaves the
// graph exactly as it was (Transactional in graph.h), so a retry with the same names succeeds.
#ifndef REPRISE_INCLUDE_REPRISE_NN_H_
#define REPRISE_INCLUDE_REPRISE_NN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"

namespace reprise::nn {

// y = x · Wᵀ + b for x [batch, in]; W is "<name>.weight" [out, in] and b "<name>.bias" [out]
// (PyTorch's layout), both initialised U(-1/sqrt(in), 1/sqrt(in)) as torch.nn.Linear does.
absl::StatusOr<Value> Linear(Graph& graph, Value x, int64_t out_features, absl::string_view name,
                             bool bias = true);

absl::StatusOr<Value> Relu(Graph& graph, Value x, absl::string_view name = "");

// y = a + b, same shapes (a residual connection).
absl::StatusOr<Value> Add(Graph& graph, Value a, Value b, absl::string_view name = "");

struct Conv2dOptions {
  int64_t kernel = 3;  // Square kernel.
  int64_t stride = 1;
  int64_t padding = 0;  // Zeros on every side.
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = false;
  Layout layout = Layout::kNCHW;
  // Weights start U(-bound, bound); 0 picks PyTorch's default for Conv2d, 1 / sqrt(fan_in).
  double weight_bound = 0;
};
// 2-D convolution of x ([N, C, H, W], or [N, H, W, C] with Layout::kNHWC). The weight
// "<name>.weight" is [out, C / groups, k, k] (PyTorch's) or [out, k, k, C / groups] for NHWC; the
// optional bias "<name>.bias" is [out]. InvalidArgument when the shapes do not fit (channels not
// divisible by groups, a stride or kernel that leaves no output).
absl::StatusOr<Value> Conv2d(Graph& graph, Value x, int64_t out_channels, absl::string_view name,
                             const Conv2dOptions& options = {});

struct BatchNormOptions {
  double epsilon = 1e-5;
  double momentum = 0.1;  // Weight of the batch statistics in the running averages (PyTorch's).
  Layout layout = Layout::kNCHW;
  bool training = true;  // false: normalise with the running statistics.
};
// Batch normalisation over N, H and W per channel. Parameters "<name>.weight" (ones) and
// "<name>.bias" (zeros); state "<name>.running_mean" (zeros) and "<name>.running_var" (ones),
// which a training step updates in place with the unbiased batch variance, as PyTorch does.
absl::StatusOr<Value> BatchNorm(Graph& graph, Value x, absl::string_view name,
                                const BatchNormOptions& options = {});

// Max over k×k windows; padding never wins (it counts as -inf).
absl::StatusOr<Value> MaxPool2d(Graph& graph, Value x, int64_t kernel, int64_t stride,
                                int64_t padding, absl::string_view name,
                                Layout layout = Layout::kNCHW);
// Mean over height and width: [N, C, H, W] (or NHWC) -> [N, C].
absl::StatusOr<Value> GlobalAvgPool(Graph& graph, Value x, absl::string_view name,
                                    Layout layout = Layout::kNCHW);
// [d0, d1, ...] -> [d0, d1·d2·...], in stored order.
absl::StatusOr<Value> Flatten(Graph& graph, Value x, absl::string_view name = "");

// Inverted dropout while training: each element is zeroed with probability `rate` and the rest are
// scaled by 1 / (1 - rate). Masks come from a counter-based generator keyed by `seed` and the
// layer's name and counted by a device-side step ("rng.step", added once per graph and advanced
// by the training step itself), so every step draws a new mask with no host work, and the same
// seed gives the same masks in every mode. InvalidArgument for a rate outside [0, 1).
absl::StatusOr<Value> Dropout(Graph& graph, Value x, double rate, absl::string_view name,
                              uint64_t seed = 0);

// Mean over the batch of -log softmax(logits)[label]; logits f32 [batch, classes], labels i32
// [batch]. Returns a scalar.
absl::StatusOr<Value> SoftmaxCrossEntropy(Graph& graph, Value logits, Value labels,
                                          absl::string_view name = "");

// The label of a row that pads a batch to a shape bucket (reprise/bucketed_trainer.h).
inline constexpr int32_t kPaddingLabel = -1;
// SoftmaxCrossEntropy over the rows whose label is not kPaddingLabel: their mean (0 if there are
// none), and a gradient that is zero on padded rows. A batch padded with such rows trains as the
// batch alone (up to the order of the sums). SetInput refuses any other label: negative labels
// other than kPaddingLabel and labels >= classes are InvalidArgument, as for SoftmaxCrossEntropy.
absl::StatusOr<Value> MaskedSoftmaxCrossEntropy(Graph& graph, Value logits, Value labels,
                                                absl::string_view name = "");

// Transformer layers (src/api/nn_transformer.cc).

// Layer normalisation over the last dimension of x [..., C], as torch.nn.LayerNorm(C): parameters
// "<name>.weight" (ones) and "<name>.bias" (zeros), both [C].
absl::StatusOr<Value> LayerNorm(Graph& graph, Value x, absl::string_view name,
                                double epsilon = 1e-5);

// GELU in its tanh form, as torch.nn.functional.gelu(x, approximate='tanh').
absl::StatusOr<Value> Gelu(Graph& graph, Value x, absl::string_view name = "");

// Rows of the table "<name>.weight" [vocab, width] picked by int32 ids of any shape: [..., width]
// (torch.nn.Embedding's layout). The table starts uniform with standard deviation `init_std`
// (GPT-2's 0.02 by default; the engine's initializers have no normal distribution). Trainer::
// SetInput refuses ids outside [0, vocab), naming the input.
absl::StatusOr<Value> Embedding(Graph& graph, Value ids, int64_t vocab, int64_t width,
                                absl::string_view name, double init_std = 0.02);

// x [..., T, C] plus the first T = `positions` rows of the table "<name>.weight"
// [max_positions, C] at every sequence: a learned position embedding (GPT-2's wpe) over a batch of
// sequences flattened to rows, so that x may be [batch·T, C]. InvalidArgument unless
// 1 <= positions <= max_positions and positions divides x's rows.
absl::StatusOr<Value> PositionEmbedding(Graph& graph, Value x, int64_t max_positions,
                                        int64_t positions, absl::string_view name,
                                        double init_std = 0.02);

}  // namespace reprise::nn

#endif  // REPRISE_INCLUDE_REPRISE_NN_H_
