// What the checkpoint, verify and report GPU tests share: an MLP with dropout and a small
// ResNet-18, trained with AdamW, gradient clipping and warm-up + cosine, and batches that depend
// only on the step number, so a run resumed at step s sees the batches the first run saw.
#ifndef REPRISE_TESTS_GPU_TRUST_TEST_MODELS_H_
#define REPRISE_TESTS_GPU_TRUST_TEST_MODELS_H_

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"

namespace reprise::testing {

struct TrustModel {
  Graph graph;
  Value loss;
  std::string input;  // "features" or "images".
  int64_t input_elements = 0;
  int64_t batch = 0;
  int64_t classes = 0;
  bool convolutional = false;
};

// features [16, 12] -> fc0 (32) -> ReLU -> dropout 0.2 -> fc1 (32) -> ReLU -> fc2 (4) -> loss.
// `width` changes the hidden width (another model, for refusals).
inline TrustModel DropoutMlp(int64_t width = 32) {
  TrustModel m;
  m.input = "features";
  m.batch = 16;
  m.classes = 4;
  m.input_elements = 16 * 12;
  Graph& g = m.graph;
  Value x = *g.AddInput("features", {Shape{16, 12}, DType::kFloat32});
  Value y = *g.AddInput("labels", {Shape{16}, DType::kInt32});
  Value h = *nn::Relu(g, *nn::Linear(g, x, width, "fc0"));
  h = *nn::Dropout(g, h, 0.2, "drop0", /*seed=*/11);
  h = *nn::Relu(g, *nn::Linear(g, h, width, "fc1"));
  m.loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, h, 4, "fc2"), y, "loss");
  return m;
}

// ResNet-18 on 32x32 images, batch 4, 4 classes.
inline TrustModel SmallResNet18() {
  auto net = models::BuildResNet({.depth = 18, .batch = 4, .classes = 4, .image_size = 32});
  EXPECT_TRUE(net.ok()) << net.status();
  TrustModel m;
  m.graph = std::move(net->graph);
  m.loss = net->loss;
  m.input = "images";
  m.batch = 4;
  m.classes = 4;
  m.input_elements = 4 * 3 * 32 * 32;
  m.convolutional = true;
  return m;
}

// AdamW with decoupled decay (not on biases and BN), clipping at norm 1 and warm-up + cosine.
inline TrainOptions TrustOptions(const TrustModel& m, ExecMode mode = ExecMode::kGraph,
                                 uint64_t seed = 3) {
  TrainOptions options;
  options.launch.mode = mode;
  options.seed = seed;
  options.numerics.deterministic =
      true;  // cuDNN weight gradients without atomics: same bits every run.
  options.optimizer = OptimizerOptions{
      .kind = OptimizerKind::kAdamW,
      .learning_rate = m.convolutional ? 1e-3f : 3e-3f,
      .weight_decay = 0.01f,
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      .schedule = {
          .warmup_steps = 5, .decay = LrDecay::kCosine, .total_steps = 400, .min_lr_factor = 0.1f}};
  return options;
}

inline std::unique_ptr<Trainer> MakeTrustTrainer(const TrustModel& m, const TrainOptions& options) {
  auto trainer = Trainer::Create(m.graph, m.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Binds the batch of step `step`: normal inputs and labels from a generator seeded by the step.
inline void FeedStep(Trainer& t, const TrustModel& m, int step) {
  std::mt19937 rng(1000 + step);
  std::normal_distribution<float> normal;
  std::vector<float> x(m.input_elements);
  std::vector<int32_t> y(m.batch);
  for (float& v : x) v = normal(rng);
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % m.classes);
  ASSERT_TRUE(t.SetInput(m.input, x).ok());
  ASSERT_TRUE(t.SetInput("labels", y).ok());
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_TRUST_TEST_MODELS_H_
