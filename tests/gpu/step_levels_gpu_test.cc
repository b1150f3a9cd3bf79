// Where the whole-step MLP's two levels come from (docs/results, "one process's step sits on one of
// two levels"), and what the non-finite guard costs once they are accounted for: several trainers
// of the same whole step (the MLP 8x256 b32 TF32, or the 4-model ensemble) in one process, each
// with its own arena (shifted by spacer allocations) and the process's one copy of each kernel,
// timed in alternating rounds.
// Measurements, not checks: run with --gtest_also_run_disabled_tests.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/owners.h"
#include "tests/gpu/device_upload.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

constexpr int kSteps = 1000;

// A whole-step workload of reprise-bench's rows: one MLP, or an ensemble of `models` batched into
// one kernel (its inputs bound stacked, "m*.features" and "m*.labels", as the bench binds them).
struct Workload {
  models::MlpConfig config;
  int models = 1;
};
// `--model mlp --depth 8 --width 256 --batch 32` and the issue-9 ensemble of 4
// (`--model ensemble --ensemble 4 --depth 2 --width 256 --input_features 64 --classes 10
// --batch 64`), both TF32.
constexpr Workload kMlp8x256{.config = {.batch = 32, .depth = 8, .width = 256}};
constexpr Workload kEnsemble4{
    .config = {.batch = 64, .input_features = 64, .depth = 2, .width = 256, .classes = 10},
    .models = 4};

struct Timed {
  NonFinitePolicy policy;
  std::unique_ptr<Trainer> trainer;
  std::vector<runtime::DeviceBuffer> inputs;  // Bound: each step copies them in on the device.
  std::vector<float> medians;                 // One per round.
};

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

// Trainers of `workload`'s TF32 whole step, one per policy given, each created after a
// spacer allocation of an odd number of MiB (no two arenas start alike), then timed in `rounds`
// alternating rounds of kSteps steps after a warm-up (which also runs kAuto's launch trial).
void TimeTrainers(const Workload& workload, const std::vector<NonFinitePolicy>& policies,
                  int rounds, std::vector<Timed>& trainers) {
  const models::MlpConfig& config = workload.config;
  Graph graph;
  Value loss;
  std::string features = "features", labels = "labels";
  if (workload.models == 1) {
    REPRISE_ASSERT_OK_AND_ASSIGN(models::Mlp mlp, models::BuildMlp(config));
    graph = std::move(mlp.graph);
    loss = mlp.loss;
  } else {
    REPRISE_ASSERT_OK_AND_ASSIGN(models::MlpEnsemble e,
                                 models::BuildMlpEnsemble(workload.models, config));
    graph = std::move(e.graph);
    loss = e.loss;
    features = "m*.features";
    labels = "m*.labels";
  }
  const int64_t rows = workload.models * config.batch;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * config.input_features);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) y[i] = static_cast<int32_t>(i % config.classes);

  std::vector<runtime::DeviceBuffer> spacers;
  trainers.resize(policies.size());
  for (size_t k = 0; k < policies.size(); ++k) {
    TrainOptions options;
    options.numerics.allow_tf32 = true;
    options.numerics.non_finite.policy = policies[k];
    options.kernels.fuse = true;
    options.kernels.whole_step = true;
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer spacer,
                                 runtime::DeviceBuffer::Create((2 * k + 1) << 20));
    spacers.push_back(std::move(spacer));
    Timed& timed = trainers[k];
    timed.policy = policies[k];
    REPRISE_ASSERT_OK_AND_ASSIGN(timed.trainer, Trainer::Create(graph, loss, options));
    Trainer& t = *timed.trainer;
    ASSERT_LE(t.stats().launches_per_step, 2) << "not the whole step";
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer xb, testing::UploadToDevice(x));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer yb, testing::UploadToDevice(y));
    REPRISE_ASSERT_OK(t.BindInput(features, xb.data(), x.size() * sizeof(float)));
    REPRISE_ASSERT_OK(t.BindInput(labels, yb.data(), y.size() * sizeof(int32_t)));
    timed.inputs.push_back(std::move(xb));
    timed.inputs.push_back(std::move(yb));
    REPRISE_ASSERT_OK(t.TimeSteps(200).status());
  }
  for (int r = 0; r < rounds; ++r) {
    for (Timed& timed : trainers) {
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> ms, timed.trainer->TimeSteps(kSteps));
      timed.medians.push_back(Median(ms));
    }
  }
  for (size_t k = 0; k < trainers.size(); ++k) {
    const TrainerStats stats = trainers[k].trainer->stats();
    std::printf("trainer %zu (%s, %s launch):", k,
                std::string(NonFinitePolicyName(trainers[k].policy)).c_str(),
                stats.device_graph_launch ? "device" : "host");
    for (float m : trainers[k].medians) std::printf(" %.4f", m);
    std::printf("  median %.4f ms\n", Median(trainers[k].medians));
  }
  for (Timed& timed : trainers) REPRISE_ASSERT_OK(timed.trainer->Synchronize());
}

// Four trainers of the unguarded step: trainers of one process on different levels point at where
// their data lies; one level per process, at the process (the kernel's code, the context).
TEST(StepLevelsGpuTest, DISABLED_MlpWholeStepTrainersInOneProcess) {
  REPRISE_REQUIRE_GPU();
  std::vector<Timed> trainers;
  TimeTrainers(kMlp8x256, std::vector<NonFinitePolicy>(4, NonFinitePolicy::kIgnore), 5, trainers);
}

// The guard's cost on `workload` with the placement's level averaged out: six pairs of an
// unguarded (kIgnore) and a guarded (kSkipStep, the default) trainer, created in alternating order
// so that neither form always takes the lower addresses, timed in alternating rounds. Prints each
// pair's difference of medians and the medians over the pairs (tools/device/guard_pairs.sh reads
// the last line).
void TimeGuardPairs(const Workload& workload) {
  constexpr int kPairs = 6;
  std::vector<NonFinitePolicy> policies;
  for (int p = 0; p < kPairs; ++p) {
    const bool guarded_first = p % 2 == 1;
    policies.push_back(guarded_first ? NonFinitePolicy::kSkipStep : NonFinitePolicy::kIgnore);
    policies.push_back(guarded_first ? NonFinitePolicy::kIgnore : NonFinitePolicy::kSkipStep);
  }
  std::vector<Timed> trainers;
  TimeTrainers(workload, policies, 7, trainers);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<float> ignore, skip, differences;
  for (int p = 0; p < kPairs; ++p) {
    const Timed& a = trainers[2 * p];
    const Timed& b = trainers[2 * p + 1];
    const Timed& guarded = a.policy == NonFinitePolicy::kSkipStep ? a : b;
    const Timed& unguarded = a.policy == NonFinitePolicy::kSkipStep ? b : a;
    ignore.push_back(Median(unguarded.medians));
    skip.push_back(Median(guarded.medians));
    differences.push_back(skip.back() - ignore.back());
    std::printf("pair %d: ignore %.4f, skip %.4f ms: %+.2f us (%+.1f%%)\n", p, ignore.back(),
                skip.back(), 1e3f * differences.back(),
                100.0f * differences.back() / ignore.back());
  }
  const float i = Median(ignore), s = Median(skip), d = Median(differences);
  std::printf(
      "over %d pairs: ignore %.4f ms, skip %.4f ms (%+.1f%%); median pair difference %+.2f us "
      "(%+.1f%%)\n",
      kPairs, i, s, 100.0f * (s / i - 1.0f), 1e3f * d, 100.0f * d / i);
}

TEST(StepLevelsGpuTest, DISABLED_MlpWholeStepGuardInOneProcess) {
  REPRISE_REQUIRE_GPU();
  TimeGuardPairs(kMlp8x256);
}

// The 4-model ensemble (the layer phases, four models' blocks): its guard has cost +10% between
// processes (docs/benchmarks_guard.md).
TEST(StepLevelsGpuTest, DISABLED_Ensemble4WholeStepGuardInOneProcess) {
  REPRISE_REQUIRE_GPU();
  TimeGuardPairs(kEnsemble4);
}

}  // namespace
}  // namespace reprise
