// Layer builders. Each adds its ops (and parameters) to a Graph and returns the output value, or
// InvalidArgument naming the layer and the shapes that do not fit.
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

}  // namespace reprise::nn

#endif  // REPRISE_INCLUDE_REPRISE_NN_H_
