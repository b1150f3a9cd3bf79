#include <iostream>
#include <vector>

#include "reprise/reprise.h"  // With REPRISE_ASSIGN_OR_RETURN and REPRISE_RETURN_IF_ERROR.

// Points of the square [-1, 1)², labelled by how many of their two coordinates are >= 0.
void NextBatch(int step, std::vector<float>& features, std::vector<int32_t>& labels) {
  for (int i = 0; i < 256; ++i) {
    features[2 * i] = ((i * 37 + step * 11) % 200) / 100.0f - 1;
    features[2 * i + 1] = ((i * 53 + step) % 200) / 100.0f - 1;
    labels[i] = (features[2 * i] >= 0) + (features[2 * i + 1] >= 0);
  }
}

absl::Status TrainLoop() {
  reprise::Graph g;
  REPRISE_ASSIGN_OR_RETURN(reprise::Value x, g.AddInput("features", {reprise::Shape{256, 2}}));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value y,
                           g.AddInput("labels", {reprise::Shape{256}, reprise::DType::kInt32}));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value h, reprise::nn::Linear(g, x, 256, "fc0"));
  REPRISE_ASSIGN_OR_RETURN(h, reprise::nn::Relu(g, h));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value logits, reprise::nn::Linear(g, h, 3, "fc1"));
  REPRISE_ASSIGN_OR_RETURN(reprise::Value loss,
                           reprise::nn::SoftmaxCrossEntropy(g, logits, y, "loss"));

  reprise::TrainOptions options;  // mode = kGraph, SGD lr 0.01 momentum 0.9
  REPRISE_ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(g, loss, options));
  std::vector<float> features(256 * 2);
  std::vector<int32_t> labels(256);
  for (int step = 0; step < 1000; ++step) {
    NextBatch(step, features, labels);
    REPRISE_RETURN_IF_ERROR(trainer->SetInput("features", features));  // absl::Span<const float>
    REPRISE_RETURN_IF_ERROR(trainer->SetInput("labels", labels));      // absl::Span<const int32_t>
    REPRISE_RETURN_IF_ERROR(trainer->Step());                          // one graph replay
  }
  REPRISE_ASSIGN_OR_RETURN(float last_loss, trainer->Loss());
  std::cout << "loss after 1000 steps: " << last_loss << "\n";
  // 100 more steps run twice, replayed and eagerly, compared bit for bit:
  REPRISE_ASSIGN_OR_RETURN(reprise::VerifyResult check, trainer->Verify(100));
  if (!check.ok()) return absl::InternalError(check.ToString());  // names the first difference
  REPRISE_RETURN_IF_ERROR(trainer->SaveWeights("mlp.safetensors", {.torch_compatible = true}));
  std::cout << trainer->Report().ToText();  // graphs, replays, re-instantiations and why, memory
  return absl::OkStatus();
}

int main() {
  if (absl::Status status = TrainLoop(); !status.ok()) {
    std::cerr << status << "\n";  // e.g. FAILED_PRECONDITION: no CUDA device ...
    return 1;
  }
  return 0;
}
