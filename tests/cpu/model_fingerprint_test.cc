// The model fingerprint: the same model built twice agrees; initial values and bound
// hyperparameters do not count; a shape, a layer, the loss or the optimizer's kind does.
#include "src/api/model_fingerprint.h"

#include <string>

#include "gtest/gtest.h"
#include "reprise/models.h"

namespace reprise {
namespace {

std::string FingerprintOf(const models::MlpConfig& config, const OptimizerOptions& optimizer = {}) {
  absl::StatusOr<models::Mlp> mlp = models::BuildMlp(config);
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return ModelFingerprint(mlp->graph, mlp->loss, optimizer);
}

constexpr models::MlpConfig kSmall = {
    .batch = 4, .input_features = 6, .depth = 2, .width = 8, .classes = 3};

TEST(ModelFingerprintTest, SameModelSameFingerprint) {
  const std::string a = FingerprintOf(kSmall);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, FingerprintOf(kSmall));
}

TEST(ModelFingerprintTest, ShapesAndLayersCount) {
  const std::string base = FingerprintOf(kSmall);
  models::MlpConfig wider = kSmall;
  wider.width = 9;
  EXPECT_NE(base, FingerprintOf(wider));
  models::MlpConfig deeper = kSmall;
  deeper.depth = 3;
  EXPECT_NE(base, FingerprintOf(deeper));
  models::MlpConfig batch = kSmall;
  batch.batch = 5;
  EXPECT_NE(base, FingerprintOf(batch));
}

TEST(ModelFingerprintTest, OptimizerKindCountsHyperparametersDoNot) {
  const OptimizerOptions sgd;
  const std::string base = FingerprintOf(kSmall, sgd);
  EXPECT_NE(base, FingerprintOf(kSmall, {.kind = OptimizerKind::kAdam}));
  EXPECT_NE(FingerprintOf(kSmall, {.kind = OptimizerKind::kAdam}),
            FingerprintOf(kSmall, {.kind = OptimizerKind::kAdamW}));
  EXPECT_NE(base, FingerprintOf(kSmall, {.kind = OptimizerKind::kSgd, .nesterov = true}));
  // Resuming with another rate, momentum or schedule is allowed.
  OptimizerOptions tuned = sgd;
  tuned.learning_rate = 0.5f;
  tuned.momentum = 0.5f;
  tuned.max_grad_norm = 1.0f;
  tuned.schedule.warmup_steps = 10;
  EXPECT_EQ(base, FingerprintOf(kSmall, tuned));
}

TEST(ModelFingerprintTest, InitialValuesAndLossChoice) {
  absl::StatusOr<models::Mlp> a = models::BuildMlp(kSmall);
  ASSERT_TRUE(a.ok());
  Graph other;
  // The same graph rebuilt node by node with other initializers fingerprints the same.
  for (const Node& node : a->graph.nodes()) {
    if (node.op_name() == "input") {
      ASSERT_TRUE(other.AddInput(node.name, node.outputs[0], Initializer::Constant(3)).ok());
    } else if (node.op_name() == "parameter") {
      ASSERT_TRUE(other.AddParameter(node.name, node.outputs[0], Initializer::Uniform(-7, 7)).ok());
    } else {
      ASSERT_TRUE(other.AddOp(*node.op, node.name, node.inputs, node.attrs).ok()) << node.name;
    }
  }
  EXPECT_EQ(ModelFingerprint(a->graph, a->loss, {}), ModelFingerprint(other, a->loss, {}));
  // Another value as the loss is another model.
  EXPECT_NE(ModelFingerprint(a->graph, a->loss, {}), ModelFingerprint(a->graph, a->logits, {}));
}

}  // namespace
}  // namespace reprise
