#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "reprise/reprise.h"  // With REPRISE_ASSIGN_OR_RETURN and REPRISE_RETURN_IF_ERROR.

absl::Status Tutorial() {
  // 1. Define a model: 2 features -> 256 ReLU -> 3 classes, batch 256, PyTorch's layer names.
  reprise::Graph g;
  REPRISE_ASSIGN_OR_RETURN(reprise::Value x, g.AddInput("features", {reprise::Shape{256, 2}}));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value y,
                           g.AddInput("labels", {reprise::Shape{256}, reprise::DType::kInt32}));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value h, reprise::nn::Linear(g, x, 256, "fc0"));
  REPRISE_ASSIGN_OR_RETURN(h, reprise::nn::Relu(g, h));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value logits, reprise::nn::Linear(g, h, 3, "fc1"));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value loss,
                           reprise::nn::SoftmaxCrossEntropy(g, logits, y, "loss"));

  // 2. Train: the whole step (forward, backward, SGD) is captured once and replayed.
  reprise::TrainOptions options;  // Graph mode; SGD, learning rate 0.01, momentum 0.9.
  options.optimizer.learning_rate = 0.1f;
  REPRISE_ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(g, loss, options));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> features(256 * 2);
  std::vector<int32_t> labels(256);
  for (int step = 0; step < 1000; ++step) {
    for (int i = 0; i < 256; ++i) {  // A toy task: the class counts the positive features.
      features[2 * i] = normal(rng);
      features[2 * i + 1] = normal(rng);
      labels[i] = (features[2 * i] > 0) + (features[2 * i + 1] > 0);
    }
    REPRISE_RETURN_IF_ERROR(trainer->SetInput("features", features));
    REPRISE_RETURN_IF_ERROR(trainer->SetInput("labels", labels));
    REPRISE_RETURN_IF_ERROR(trainer->Step());  // One graph replay.
  }
  REPRISE_ASSIGN_OR_RETURN(float last_loss, trainer->Loss());
  std::cout << "loss after 1000 steps: " << last_loss << "\n";

  // 3. Checkpoint: the whole training state; a restored run continues bit for bit.
  REPRISE_RETURN_IF_ERROR(trainer->SaveCheckpoint("mlp.ckpt"));
  REPRISE_RETURN_IF_ERROR(trainer->RestoreCheckpoint("mlp.ckpt"));

  // 4. Verify: 100 steps replayed from the graph against 100 eager steps, bit for bit.
  REPRISE_ASSIGN_OR_RETURN(reprise::VerifyResult check, trainer->Verify(100));
  if (!check.ok()) return absl::InternalError(check.ToString());  // Names the first difference.
  std::cout << trainer->Report().ToText();  // Graph nodes, replays, re-captures and why, memory.

  // 5. Weights for PyTorch: exactly the module's state dict (fc0.weight, ...), nothing else.
  return trainer->SaveWeights("mlp.safetensors", {.torch_compatible = true});
}

int main() {
  if (absl::Status status = Tutorial(); !status.ok()) {
    std::cerr << status << "\n";  // e.g. FAILED_PRECONDITION: Trainer needs a CUDA device ...
    return 1;
  }
  return 0;
}
