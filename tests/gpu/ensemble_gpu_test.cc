// Ensemble batching on the GPU: K MLPs trained batched agree with the same K trained unbatched
// (per-model losses and updates within fp32 tolerance: the batched GEMMs may pick other
// algorithms), a captured replay of the batched step gives the bulked run's bits, and every
// per-model name still works: inputs, parameters, weight files (which move between batched and
// unbatched trainers), with clear errors for names that do not exist.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

constexpr int kModels = 4;
constexpr int kBatch = 32, kFeatures = 16, kClasses = 5;

models::MlpConfig Config() {
  return {
      .batch = kBatch, .input_features = kFeatures, .depth = 2, .width = 64, .classes = kClasses};
}

std::unique_ptr<Trainer> MakeTrainer(const models::MlpEnsemble& e, ExecMode mode, bool batch) {
  TrainOptions options;
  options.launch.mode = mode;
  options.parallel.batch_ensembles = batch;
  // The batched per-layer path (library GEMMs); batched_mlp_step_gpu_test.cc tests the whole-step
  // kernel that ensembles of small MLPs get by default.
  options.kernels.whole_step = false;
  options.seed = 11;
  options.optimizer.learning_rate = 0.05f;
  options.fetch = e.losses;
  auto trainer = Trainer::Create(e.graph, e.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Each model gets batches of its own (step s, model k) and a label rule of its own.
void SetBatches(Trainer& t, int step) {
  for (int k = 0; k < kModels; ++k) {
    std::mt19937 rng(1000 * step + k);
    std::normal_distribution<float> normal;
    std::vector<float> x(kBatch * kFeatures);
    std::vector<int32_t> y(kBatch);
    for (float& v : x) v = normal(rng);
    for (int i = 0; i < kBatch; ++i) {
      y[i] = static_cast<int32_t>(std::fabs(x[i * kFeatures + k] * 3.0f)) % kClasses;
    }
    const std::string m = absl::StrCat("m", k, ".");
    ASSERT_TRUE(t.SetInput(m + "features", x).ok());
    ASSERT_TRUE(t.SetInput(m + "labels", y).ok());
  }
}

// Per step, each model's loss.
std::vector<std::vector<float>> Train(Trainer& t, const models::MlpEnsemble& e, int steps) {
  std::vector<std::vector<float>> losses;
  for (int s = 0; s < steps; ++s) {
    SetBatches(t, s);
    EXPECT_TRUE(t.Step().ok());
    std::vector<float> per_model;
    for (const Value& loss : e.losses) {
      auto v = t.Read(loss);
      EXPECT_TRUE(v.ok()) << v.status();
      per_model.push_back(v.ok() ? (*v)[0] : NAN);
    }
    losses.push_back(per_model);
  }
  return losses;
}

TEST(EnsembleGpuTest, BatchedStepAgreesWithUnbatchedPerModel) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(kModels, Config()));
  auto batched = MakeTrainer(e, ExecMode::kGraph, true);
  auto unbatched = MakeTrainer(e, ExecMode::kGraph, false);
  ASSERT_TRUE(batched && unbatched);
  const std::vector<std::string> names = unbatched->ParameterNames();
  ASSERT_EQ(batched->ParameterNames(), names);
  std::vector<std::vector<float>> before;
  for (const std::string& name : names) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> w, unbatched->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> wb, batched->GetParameter(name));
    EXPECT_EQ(w, wb) << name << ": both start from each model's own initial weights";
    before.push_back(std::move(w));
  }
  const auto got = Train(*batched, e, 1);
  const auto want = Train(*unbatched, e, 1);
  for (int k = 0; k < kModels; ++k) EXPECT_NEAR(got[0][k], want[0][k], 1e-5f) << "model " << k;
  auto index = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  testing::ExpectUpdatesAgree(
      names, [&](const std::string& n) { return before[index(n)]; },
      [&](const std::string& n) { return *batched->GetParameter(n); },
      [&](const std::string& n) { return *unbatched->GetParameter(n); });
  // Ten more steps: the models keep learning alike.
  const auto got10 = Train(*batched, e, 10);
  const auto want10 = Train(*unbatched, e, 10);
  for (int k = 0; k < kModels; ++k) {
    EXPECT_NEAR(got10.back()[k], want10.back()[k], 1e-3f * std::fabs(want10.back()[k]) + 1e-4f);
  }
}

TEST(EnsembleGpuTest, BatchedGraphReplayEqualsBulkedBitwise) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(kModels, Config()));
  auto graph = MakeTrainer(e, ExecMode::kGraph, true);
  auto bulked = MakeTrainer(e, ExecMode::kBulked, true);
  ASSERT_TRUE(graph && bulked);
  int batched_matmuls = 0;
  for (const Node& node : graph->training_graph().nodes()) {
    batched_matmuls +=
        node.op_name() == "batched_matmul" || node.op_name() == "batched_matmul_bias";
    EXPECT_NE(node.op_name(), "matmul") << node.name;
  }
  EXPECT_EQ(batched_matmuls, 8) << "3 forward, 3 weight-gradient and 2 data-gradient GEMMs";
  EXPECT_EQ(Train(*graph, e, 8), Train(*bulked, e, 8));
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*graph->GetParameter(name), *bulked->GetParameter(name)) << name;
  }
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
}

// A deep ensemble: every model trains on the same batch (shared inputs, tiled per model; batched,
// the whole-step kernel reads them untiled).
TEST(EnsembleGpuTest, ModelsSharingOneBatchAgreeWithUnbatched) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  REPRISE_ASSERT_OK_AND_ASSIGN(const Value x, g.AddInput("features", {Shape{kBatch, kFeatures}}));
  REPRISE_ASSERT_OK_AND_ASSIGN(const Value y, g.AddInput("labels", {Shape{kBatch}, DType::kInt32}));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      const std::vector<Value> losses,
      models::Ensemble(g, kModels, [&](Graph& graph, absl::string_view prefix, int) {
        Value h = *nn::Relu(graph, *nn::Linear(graph, x, 64, absl::StrCat(prefix, "fc0")));
        Value logits = *nn::Linear(graph, h, kClasses, absl::StrCat(prefix, "fc1"));
        return nn::SoftmaxCrossEntropy(graph, logits, y, absl::StrCat(prefix, "loss"));
      }));
  REPRISE_ASSERT_OK_AND_ASSIGN(const Value total, models::SumLosses(g, losses));
  std::vector<float> per_mode;
  for (const bool batch : {true, false}) {
    TrainOptions options;
    options.parallel.batch_ensembles = batch;
    options.seed = 3;
    REPRISE_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(g, total, options));
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    std::vector<float> features(kBatch * kFeatures);
    std::vector<int32_t> labels(kBatch);
    for (int s = 0; s < 5; ++s) {
      for (float& v : features) v = normal(rng);
      for (int32_t& l : labels) l = static_cast<int32_t>(rng() % kClasses);
      REPRISE_ASSERT_OK(trainer->SetInput("features", features));
      REPRISE_ASSERT_OK(trainer->SetInput("labels", labels));
      REPRISE_ASSERT_OK(trainer->Step());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, trainer->Loss());
    per_mode.push_back(loss);
    labels[0] = kClasses;  // The shared labels are still range-checked.
    EXPECT_EQ(trainer->SetInput("labels", labels).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_NEAR(per_mode[0], per_mode[1], 1e-4f * std::fabs(per_mode[1]));
}

TEST(EnsembleGpuTest, PerModelNamesReadWriteAndMoveBetweenBatchedAndUnbatched) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(kModels, Config()));
  auto batched = MakeTrainer(e, ExecMode::kGraph, true);
  ASSERT_TRUE(batched);
  EXPECT_THAT(batched->ParameterNames(), Contains("m3.fc1.weight"));
  // Writing one model's weights leaves the others alone.
  REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> m1, batched->GetParameter("m1.fc0.bias"));
  std::vector<float> ones(m1.size(), 1.0f);
  REPRISE_ASSERT_OK(batched->SetParameter("m2.fc0.bias", ones));
  EXPECT_EQ(*batched->GetParameter("m2.fc0.bias"), ones);
  EXPECT_EQ(*batched->GetParameter("m1.fc0.bias"), m1);
  Train(*batched, e, 3);

  const std::string path = ::testing::TempDir() + "/ensemble_weights.safetensors";
  REPRISE_ASSERT_OK(batched->SaveWeights(path));
  auto unbatched = MakeTrainer(e, ExecMode::kGraph, false);
  ASSERT_TRUE(unbatched);
  REPRISE_ASSERT_OK(unbatched->LoadWeights(path, {.allow_unexpected = false}));
  for (const std::string& name : unbatched->ParameterNames()) {
    EXPECT_EQ(*unbatched->GetParameter(name), *batched->GetParameter(name)) << name;
  }
  // And back: an unbatched file loads into the batched trainer, momenta included.
  Train(*unbatched, e, 1);
  REPRISE_ASSERT_OK(unbatched->SaveWeights(path));
  REPRISE_ASSERT_OK(batched->LoadWeights(path, {.allow_unexpected = false}));
  EXPECT_EQ(*batched->GetParameter("m3.fc2.weight"), *unbatched->GetParameter("m3.fc2.weight"));

  // Errors name what is wrong.
  EXPECT_THAT(batched->GetParameter("m4.fc0.weight").status().message(),
              HasSubstr("no parameter named 'm4.fc0.weight'"));
  EXPECT_EQ(batched->SetParameter("m0.fc0.bias", {1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(batched->SetInput("m9.features", std::vector<float>(kBatch * kFeatures)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(batched->SetInput("m0.features", std::vector<float>(3)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad(kBatch, 0);
  bad[5] = kClasses;
  EXPECT_THAT(batched->SetInput("m2.labels", bad).message(), HasSubstr("outside [0, 5)"));
  REPRISE_ASSERT_OK_AND_ASSIGN(absl::Span<float> slice, batched->InputBuffer("m1.features"));
  EXPECT_EQ(slice.size(), static_cast<size_t>(kBatch * kFeatures));
}

}  // namespace
}  // namespace reprise
