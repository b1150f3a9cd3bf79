// Ready-made models.
#ifndef REPRISE_INCLUDE_REPRISE_MODELS_H_
#define REPRISE_INCLUDE_REPRISE_MODELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
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

struct ResNetConfig {
  int depth = 50;  // 18, 34 (basic blocks), 50, 101 or 152 (bottleneck blocks).
  int64_t batch = 32;
  int64_t classes = 1000;
  int64_t image_size = 224;  // Square images; at least 32 (five halvings leave 1×1).
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kFloat32;  // float32, or float64 for CPU reference checks.
};

struct ResNet {
  Graph graph;
  Value images;  // Input "images" [batch, 3, size, size] (NCHW) or [batch, size, size, 3] (NHWC).
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

}  // namespace reprise::models

#endif  // REPRISE_INCLUDE_REPRISE_MODELS_H_
