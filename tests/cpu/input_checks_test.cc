// What Trainer::Create refuses in its options and SetInput in the values it binds, checked
// without a GPU: NaN, infinite and out-of-range hyperparameters, labels outside a loss's range.
#include "src/api/input_checks.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(InputChecksTest, LearningRateMustBeFiniteAndNonNegative) {
  EXPECT_TRUE(CheckHyperparameterInput("learning_rate", 0.1f).ok());
  EXPECT_TRUE(CheckHyperparameterInput("learning_rate", 0).ok());
  for (float bad : {kNaN, kInf, -kInf, -1.0f}) {
    const absl::Status s = CheckHyperparameterInput("learning_rate", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("learning_rate"), HasSubstr(absl::StrCat(bad))));
  }
}

TEST(InputChecksTest, OtherOptimizerInputsHaveTheirRanges) {
  EXPECT_EQ(CheckHyperparameterInput("momentum", kNaN).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckHyperparameterInput("weight_decay", -0.5f).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckHyperparameterInput("max_grad_norm", kInf).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status beta = CheckHyperparameterInput("beta2", 1.0f);
  EXPECT_EQ(beta.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beta.message(), AllOf(HasSubstr("beta2"), HasSubstr("[0, 1)")));
  EXPECT_TRUE(CheckHyperparameterInput("beta1", 0.9f).ok());
  // Adam's epsilon: at 0 a parameter with no gradient yet would update by 0 / 0.
  EXPECT_TRUE(CheckHyperparameterInput("epsilon", 1e-8f).ok());
  EXPECT_THAT(CheckHyperparameterInput("epsilon", 0).message(),
              HasSubstr("'epsilon' must be finite and greater than 0, got 0"));
  // A user's own scalar input is no hyperparameter: any value.
  EXPECT_TRUE(CheckHyperparameterInput("temperature", kNaN).ok());
}

TEST(InputChecksTest, LabelsOutsideTheClassesAreRefusedNamingInputIndexAndLoss) {
  const std::vector<int32_t> labels = {0, 2, 3};
  const absl::Status s = CheckLabels("labels", "loss", {.classes = 3}, labels);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'labels'"), HasSubstr("label 3 at index 2"),
                                 HasSubstr("[0, 3)"), HasSubstr("'loss'")));
  EXPECT_TRUE(CheckLabels("labels", "loss", {.classes = 4}, labels).ok());
}

TEST(InputChecksTest, TheMaskedLossTakesThePaddingLabelAndNothingElseOutOfRange) {
  const std::vector<int32_t> padded = {1, nn::kPaddingLabel, 0};
  EXPECT_TRUE(CheckLabels("labels", "loss", {.classes = 2, .padding_allowed = true}, padded).ok());
  // Without the mask, the padding label is out of range like any other.
  EXPECT_EQ(CheckLabels("labels", "loss", {.classes = 2}, padded).code(),
            absl::StatusCode::kInvalidArgument);
  for (int32_t bad : {-2, 2, std::numeric_limits<int32_t>::min()}) {
    const std::vector<int32_t> labels = {0, bad};
    const absl::Status s =
        CheckLabels("labels", "masked", {.classes = 2, .padding_allowed = true}, labels);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(absl::StrCat("label ", bad, " at index 1")),
                                   HasSubstr("padding label -1"), HasSubstr("'masked'")));
  }
}

TEST(InputChecksTest, TrainOptionsRefuseNonFiniteAndOutOfRangeFieldsNamingThem) {
  EXPECT_TRUE(ValidateTrainOptions({}).ok());
  auto refused = [](const TrainOptions& o, absl::string_view field) {
    const absl::Status s = ValidateTrainOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(s.message(), HasSubstr(field));
  };
  TrainOptions o;
  o.optimizer.learning_rate = kNaN;
  refused(o, "TrainOptions::optimizer: OptimizerOptions::learning_rate");
  o = {};
  o.optimizer.momentum = -kInf;
  refused(o, "TrainOptions::optimizer: OptimizerOptions::momentum");
  o = {};
  o.optimizer.weight_decay = kInf;
  refused(o, "TrainOptions::optimizer: OptimizerOptions::weight_decay");
  o = {};
  o.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdam, .beta1 = kNaN};
  refused(o, "beta1");
  o = {};
  o.optimizer = OptimizerOptions{.max_grad_norm = kInf};
  refused(o, "max_grad_norm");
  o = {};
  o.optimizer =
      OptimizerOptions{.schedule = {.decay = LrDecay::kStep, .step_size = 1, .gamma = kNaN}};
  refused(o, "gamma");
  o = {};
  o.numerics.loss_scale = {.mode = LossScaling::kDynamic, .backoff_factor = kNaN};
  refused(o, "backoff_factor");
  o = {};
  o.launch.lanes = 9;
  refused(o, "lanes");
  o = {};
  o.parallel.ensemble_min_models = 0;
  refused(o, "ensemble_min_models");
  o = {};
  o.kernels.ensemble_whole_step_max_models = -2;
  refused(o, "ensemble_whole_step_max_models");
  o = {};
  o.numerics.compute_dtype = DType::kInt32;
  refused(o, "compute_dtype");
  o = {};
  o.launch.mode = static_cast<ExecMode>(7);
  refused(o, "TrainOptions::launch.mode");
  o = {};
  o.device = -1;
  refused(o, "device");
}

TEST(InputChecksTest, CreateRefusesBadOptionsBeforeLookingForAGpu) {
  const auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  ASSERT_TRUE(mlp.ok());
  TrainOptions o;
  o.optimizer.learning_rate = kNaN;
  const auto trainer = Trainer::Create(mlp->graph, mlp->loss, o);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trainer.status().message(),
              HasSubstr("TrainOptions::optimizer: OptimizerOptions::learning_rate"));
}

// A loss or a fetched value of another graph is refused before any device work: its number
// would name another node of the trained graph. A copy of the graph takes the source's values.
TEST(InputChecksTest, CreateRefusesValuesOfAnotherGraph) {
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 8, .depth = 1, .width = 8});
  auto other = models::BuildMlp({.batch = 4, .input_features = 8, .depth = 1, .width = 8});
  ASSERT_TRUE(mlp.ok() && other.ok());
  auto foreign_loss = Trainer::Create(mlp->graph, other->loss, TrainOptions{});
  EXPECT_EQ(foreign_loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(foreign_loss.status().message(), HasSubstr("the loss: SpecOf: the value (node"));
  EXPECT_THAT(foreign_loss.status().message(), HasSubstr("was made by another graph"));
  TrainOptions fetch;
  fetch.fetch = {mlp->logits, other->logits};
  auto foreign_fetch = Trainer::Create(mlp->graph, mlp->loss, fetch);
  EXPECT_THAT(foreign_fetch.status().message(), HasSubstr("TrainOptions::fetch[1]: "));
  const Graph copy = mlp->graph;
  EXPECT_TRUE(CheckValuesOfGraph(copy, mlp->loss, {mlp->logits}).ok());
  EXPECT_FALSE(CheckValuesOfGraph(copy, other->loss, {}).ok());
}

}  // namespace
}  // namespace reprise
