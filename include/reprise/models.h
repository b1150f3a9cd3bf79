// Ready-made models.
#ifndef REPRISE_INCLUDE_REPRISE_MODELS_H_
#define REPRISE_INCLUDE_REPRISE_MODELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "reprise/graph.h"

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

}  // namespace reprise::models

#endif  // REPRISE_INCLUDE_REPRISE_MODELS_H_
