// The ensemble whole step on the GPU (batched_mlp_train_step, src/ops/mlp_step.h): K MLPs built
// as separate models, batched and trained as one cooperative launch, agree per model with the
// float32 CPU reference of the unbatched models (K = 2, 4, 32, odd and unaligned shapes, one
// layer); a captured replay gives the bulked run's bits over 20 steps; every step is one launch
// after the input copy; per-model names, losses and weight files keep working.
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/reference_executor.h"
#include "src/util/safetensors.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

struct Case {
  const char* name;
  int models;
  models::MlpConfig config;
};

const SgdOptions kSgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};

std::unique_ptr<Trainer> MakeTrainer(const models::MlpEnsemble& e, ExecMode mode,
                                     bool whole_step = true, bool batch = true, bool tf32 = false,
                                     NonFinitePolicy policy = NonFinitePolicy::kSkipStep) {
  TrainOptions options;
  options.launch.mode = mode;
  options.numerics.non_finite.policy = policy;
  options.numerics.allow_tf32 = tf32;
  options.parallel.batch_ensembles = batch;
  options.kernels.whole_step = whole_step;
  options.kernels.ensemble_whole_step_max_models = 1 << 20;  // The whole step at every K tested.
  options.seed = 5;
  options.optimizer = autodiff::FromSgd(kSgd);
  options.fetch = e.losses;
  auto trainer = Trainer::Create(e.graph, e.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

int CountOp(const Trainer& t, const std::string& op) {
  int n = 0;
  for (const Node& node : t.training_graph().nodes()) n += node.op_name() == op;
  return n;
}

// Model k's batch for step s: features and labels of its own.
struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch BatchFor(const models::MlpConfig& c, int step, int k) {
  std::mt19937 rng(1000 * step + k);
  std::normal_distribution<float> normal;
  Batch b{std::vector<float>(c.batch * c.input_features), std::vector<int32_t>(c.batch)};
  for (float& v : b.x) v = normal(rng);
  for (int32_t& v : b.y) v = static_cast<int32_t>(rng() % c.classes);
  return b;
}

void Feed(Trainer& t, const Case& c, int step) {
  for (int k = 0; k < c.models; ++k) {
    const Batch b = BatchFor(c.config, step, k);
    const std::string m = absl::StrCat("m", k, ".");
    ASSERT_TRUE(t.SetInput(m + "features", b.x).ok());
    ASSERT_TRUE(t.SetInput(m + "labels", b.y).ok());
  }
}

class EnsembleWholeStepGpuTest : public ::testing::TestWithParam<Case> {};

// Every tensor of the trainer's weight file (parameters and momenta, per model), by name.
std::map<std::string, std::vector<float>> SavedTensors(Trainer& t, const std::string& file) {
  std::map<std::string, std::vector<float>> tensors;
  const std::string path = ::testing::TempDir() + "/" + file + ".safetensors";
  EXPECT_TRUE(t.SaveWeights(path).ok());
  absl::StatusOr<util::SafetensorsFile> saved = util::ReadSafetensors(path);
  EXPECT_TRUE(saved.ok()) << saved.status();
  if (!saved.ok()) return tensors;
  for (const util::SafetensorsEntry& entry : saved->entries) {
    // The non-finite guard's counters belong to a trainer's run, not to the model.
    if (absl::StartsWith(entry.name, "non_finite.")) continue;
    const absl::string_view data = saved->Data(entry);
    std::vector<float>& v = tensors[entry.name];
    v.resize(data.size() / sizeof(float));
    std::memcpy(v.data(), data.data(), v.size() * sizeof(float));
  }
  return tensors;
}

double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// Three steps of the whole-step trainer against the float32 CPU reference of the user's graph
// (K separate models, unbatched) from the same weights and batches.
TEST_P(EnsembleWholeStepGpuTest, MatchesTheUnbatchedCpuReferencePerModel) {
  REPRISE_REQUIRE_GPU();
  const Case& c = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(c.models, c.config));
  auto trainer = MakeTrainer(e, ExecMode::kGraph);
  ASSERT_TRUE(trainer);
  ASSERT_EQ(CountOp(*trainer, "batched_mlp_train_step"), 1);
  EXPECT_EQ(trainer->stats().launches_per_step, 2) << "the input copy and the whole step";
  REPRISE_ASSERT_OK_AND_ASSIGN(autodiff::TrainingGraph training,
                               autodiff::BuildTrainingGraph(e.graph, e.loss, kSgd));
  ir::ReferenceExecutor cpu(training.graph, /*float64=*/false, 5);
  const std::vector<std::string> names = trainer->ParameterNames();
  std::vector<std::vector<float>> before;
  for (const std::string& name : names) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> w, trainer->GetParameter(name));
    REPRISE_ASSERT_OK(cpu.SetLeaf(name, std::vector<double>(w.begin(), w.end())));
    before.push_back(std::move(w));
  }
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(Feed(*trainer, c, step));
    for (int k = 0; k < c.models; ++k) {
      const Batch b = BatchFor(c.config, step, k);
      const std::string m = absl::StrCat("m", k, ".");
      REPRISE_ASSERT_OK(cpu.SetLeaf(m + "features", std::vector<double>(b.x.begin(), b.x.end())));
      REPRISE_ASSERT_OK(cpu.SetLeaf(m + "labels", b.y));
    }
    REPRISE_ASSERT_OK(trainer->Step());
    REPRISE_ASSERT_OK(cpu.Run());
    for (int k = 0; k < c.models; ++k) {
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> got, trainer->Read(e.losses[k]));
      const float want = (*cpu.Tensor(e.losses[k]))->data<float>()[0];
      EXPECT_NEAR(got[0], want, 1e-5f * std::max(1.0f, std::fabs(want)))
          << "model " << k << ", step " << step;
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float total, trainer->Loss());
    const float want_total = (*cpu.Tensor(e.loss))->data<float>()[0];
    EXPECT_NEAR(total, want_total, 1e-5f * std::max(1.0f, std::fabs(want_total)));
  }
  auto cpu_parameter = [&](const std::string& name) {
    const ir::HostTensor* t = *cpu.Leaf(name);
    return std::vector<float>(t->data<float>().begin(), t->data<float>().end());
  };
  const std::map<std::string, std::vector<float>> saved = SavedTensors(*trainer, c.name);
  for (const std::string& name : names) {
    EXPECT_LE(RelativeError(saved.at(name), cpu_parameter(name)), 1e-5) << name;
    const std::string momentum = name + ".momentum";
    ASSERT_TRUE(saved.contains(momentum)) << momentum;
    // Momenta are sums of gradients, whose bias parts cancel (update_agreement.h): a wrong model
    // or stride is off by order 1.
    EXPECT_LE(RelativeError(saved.at(momentum), cpu_parameter(momentum)), 1e-2) << momentum;
  }
  testing::ExpectUpdatesAgree(
      names,
      [&](const std::string& n) {
        return before[std::find(names.begin(), names.end(), n) - names.begin()];
      },
      [&](const std::string& n) { return *trainer->GetParameter(n); }, cpu_parameter);
}

// A captured replay gives the bulked run's bits: per-model losses every step, every parameter and
// momentum after 20 steps; one instantiation.
// `policy`: the default guard (every schedule but the clusters: 32 models run the group schedule
// guarded), or kIgnore (the cluster schedule too, where it fits).
void ExpectGraphReplayEqualsBulkedOver20Steps(const Case& c, bool tf32,
                                              NonFinitePolicy policy = NonFinitePolicy::kSkipStep) {
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(c.models, c.config));
  auto graph = MakeTrainer(e, ExecMode::kGraph, true, true, tf32, policy);
  auto bulked = MakeTrainer(e, ExecMode::kBulked, true, true, tf32, policy);
  ASSERT_TRUE(graph && bulked);
  ASSERT_EQ(CountOp(*graph, "batched_mlp_train_step"), 1);
  ASSERT_EQ(CountOp(*bulked, "batched_mlp_train_step"), 1);
  for (int step = 0; step < 20; ++step) {
    for (Trainer* t : {graph.get(), bulked.get()}) {
      ASSERT_NO_FATAL_FAILURE(Feed(*t, c, step));
      REPRISE_ASSERT_OK(t->Step());
    }
    for (int k = 0; k < c.models; ++k) {
      EXPECT_EQ(*graph->Read(e.losses[k]), *bulked->Read(e.losses[k]))
          << "model " << k << ", step " << step;
    }
  }
  const auto replayed = SavedTensors(*graph, absl::StrCat(c.name, "_graph"));
  const auto eager = SavedTensors(*bulked, absl::StrCat(c.name, "_bulked"));
  EXPECT_EQ(replayed.size(), eager.size());
  for (const auto& [name, values] : eager) {
    ASSERT_TRUE(replayed.contains(name)) << name;
    EXPECT_TRUE(replayed.at(name) == values) << name << " differs";
  }
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
}

TEST_P(EnsembleWholeStepGpuTest, GraphReplayEqualsBulkedBitwiseOver20Steps) {
  REPRISE_REQUIRE_GPU();
  ExpectGraphReplayEqualsBulkedOver20Steps(GetParam(), /*tf32=*/false);
}

// The same with allow_tf32: the whole-step kernel's GEMMs on TF32 tensor cores.
TEST(EnsembleWholeStepGpuTest, Tf32GraphReplayEqualsBulkedBitwiseOver20Steps) {
  REPRISE_REQUIRE_GPU();
  ExpectGraphReplayEqualsBulkedOver20Steps(Case{"K32Issue9Tf32", 32, {64, 64, 2, 256, 10}},
                                           /*tf32=*/true);
  ExpectGraphReplayEqualsBulkedOver20Steps(Case{"K5UnalignedTf32", 5, {17, 33, 1, 45, 7}},
                                           /*tf32=*/true);
  ExpectGraphReplayEqualsBulkedOver20Steps(Case{"K8UnalignedTf32", 8, {17, 33, 3, 45, 7}},
                                           /*tf32=*/true);
  // Unguarded, the cluster schedule (TF32, 8 models or more) with padded, unaligned shapes and
  // four layers, and the group schedule (32 models).
  ExpectGraphReplayEqualsBulkedOver20Steps(Case{"K8UnalignedTf32", 8, {17, 33, 3, 45, 7}},
                                           /*tf32=*/true, NonFinitePolicy::kIgnore);
  ExpectGraphReplayEqualsBulkedOver20Steps(Case{"K32Issue9Tf32", 32, {64, 64, 2, 256, 10}},
                                           /*tf32=*/true, NonFinitePolicy::kIgnore);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EnsembleWholeStepGpuTest,
    ::testing::Values(Case{"K2", 2, {16, 12, 2, 32, 5}}, Case{"K4Issue9", 4, {64, 64, 2, 256, 10}},
                      Case{"K32Issue9", 32, {64, 64, 2, 256, 10}},
                      Case{"K3Odd", 3, {5, 3, 2, 7, 3}}, Case{"K5Unaligned", 5, {17, 33, 1, 45, 7}},
                      Case{"K2OneLayer", 2, {9, 6, 0, 1, 4}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// whole_step = false keeps the batched per-layer step; both agree.
TEST(EnsembleWholeStepGpuTest, WholeStepOffRunsBatchedPerLayerAndAgrees) {
  REPRISE_REQUIRE_GPU();
  const Case c{"K4", 4, {32, 16, 2, 64, 5}};
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(c.models, c.config));
  auto whole = MakeTrainer(e, ExecMode::kGraph, true);
  auto per_layer = MakeTrainer(e, ExecMode::kGraph, false);
  ASSERT_TRUE(whole && per_layer);
  EXPECT_EQ(CountOp(*whole, "batched_mlp_train_step"), 1);
  EXPECT_EQ(CountOp(*per_layer, "batched_mlp_train_step"), 0);
  EXPECT_GT(CountOp(*per_layer, "batched_matmul_bias"), 0);
  const std::vector<std::string> names = whole->ParameterNames();
  std::vector<std::vector<float>> before;
  for (const std::string& n : names) before.push_back(*whole->GetParameter(n));
  for (int step = 0; step < 3; ++step) {
    for (Trainer* t : {whole.get(), per_layer.get()}) {
      ASSERT_NO_FATAL_FAILURE(Feed(*t, c, step));
      REPRISE_ASSERT_OK(t->Step());
    }
    for (int k = 0; k < c.models; ++k) {
      const float want = (*per_layer->Read(e.losses[k]))[0];
      EXPECT_NEAR((*whole->Read(e.losses[k]))[0], want, 1e-4f * std::max(1.0f, std::fabs(want)))
          << "model " << k << ", step " << step;
    }
  }
  testing::ExpectUpdatesAgree(
      names,
      [&](const std::string& n) {
        return before[std::find(names.begin(), names.end(), n) - names.begin()];
      },
      [&](const std::string& n) { return *whole->GetParameter(n); },
      [&](const std::string& n) { return *per_layer->GetParameter(n); });
}

// Per-model names under the whole step: one model's weights written alone, weight files moving
// to an unbatched trainer and back.
TEST(EnsembleWholeStepGpuTest, PerModelNamesAndWeightFilesKeepWorking) {
  REPRISE_REQUIRE_GPU();
  const Case c{"K3", 3, {8, 6, 1, 16, 4}};
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::MlpEnsemble e,
                               models::BuildMlpEnsemble(c.models, c.config));
  auto whole = MakeTrainer(e, ExecMode::kGraph);
  ASSERT_TRUE(whole);
  ASSERT_EQ(CountOp(*whole, "batched_mlp_train_step"), 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> m0, whole->GetParameter("m0.fc1.bias"));
  const std::vector<float> ones(m0.size(), 1.0f);
  REPRISE_ASSERT_OK(whole->SetParameter("m1.fc1.bias", ones));
  EXPECT_EQ(*whole->GetParameter("m1.fc1.bias"), ones);
  EXPECT_EQ(*whole->GetParameter("m0.fc1.bias"), m0);
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(Feed(*whole, c, step));
    REPRISE_ASSERT_OK(whole->Step());
  }
  const std::string path = ::testing::TempDir() + "/ensemble_whole_step.safetensors";
  REPRISE_ASSERT_OK(whole->SaveWeights(path));
  auto unbatched = MakeTrainer(e, ExecMode::kGraph, true, /*batch=*/false);
  ASSERT_TRUE(unbatched);
  REPRISE_ASSERT_OK(unbatched->LoadWeights(path, {.allow_unexpected = false}));
  for (const std::string& name : unbatched->ParameterNames()) {
    EXPECT_EQ(*unbatched->GetParameter(name), *whole->GetParameter(name)) << name;
  }
  // The same next batch: each model's loss as its unbatched twin's.
  for (Trainer* t : {whole.get(), unbatched.get()}) {
    ASSERT_NO_FATAL_FAILURE(Feed(*t, c, 3));
    REPRISE_ASSERT_OK(t->Step());
  }
  for (int k = 0; k < c.models; ++k) {
    const float want = (*unbatched->Read(e.losses[k]))[0];
    EXPECT_NEAR((*whole->Read(e.losses[k]))[0], want, 1e-5f * std::max(1.0f, std::fabs(want)));
  }
  REPRISE_ASSERT_OK(unbatched->SaveWeights(path));
  REPRISE_ASSERT_OK(whole->LoadWeights(path, {.allow_unexpected = false}));
  EXPECT_EQ(SavedTensors(*whole, "whole_again"), SavedTensors(*unbatched, "unbatched_again"))
      << "parameters and momenta, every model";
}

}  // namespace
}  // namespace reprise
