// Where the whole-step MLP's two levels come from (docs/results, "one process's step sits on one of
// two levels"): several trainers of the same MLP 8x256 b32 TF32 whole step in one process, each
// with its own arena (shifted by spacer allocations) and the process's one copy of the kernel,
// timed in alternating rounds. Trainers of one process on different levels point at where their
// data lies; one level per process, at the process (the kernel's code, the context). A
// measurement, not a check: run with --gtest_also_run_disabled_tests.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/owners.h"
#include "tests/gpu/device_upload.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

constexpr int kBatch = 32, kTrainers = 4, kRounds = 5, kSteps = 1000;

struct Timed {
  std::unique_ptr<Trainer> trainer;
  std::vector<runtime::DeviceBuffer> inputs;  // Bound: each step copies them in on the device.
  std::vector<float> medians;
};

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(StepLevelsGpuTest, DISABLED_MlpWholeStepTrainersInOneProcess) {
  REPRISE_REQUIRE_GPU();
  const models::MlpConfig config{.batch = kBatch, .depth = 8, .width = 256};
  REPRISE_ASSERT_OK_AND_ASSIGN(const models::Mlp mlp, models::BuildMlp(config));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * config.input_features);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(kBatch);
  for (int i = 0; i < kBatch; ++i) y[i] = i % config.classes;

  TrainOptions options;
  options.numerics.allow_tf32 = true;
  options.kernels.fuse = true;
  options.kernels.whole_step = true;
  std::vector<runtime::DeviceBuffer> spacers;  // Odd MiB apart: no two arenas start alike.
  std::vector<Timed> trainers(kTrainers);
  for (int k = 0; k < kTrainers; ++k) {
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer spacer,
                                 runtime::DeviceBuffer::Create((2 * k + 1) << 20));
    spacers.push_back(std::move(spacer));
    REPRISE_ASSERT_OK_AND_ASSIGN(trainers[k].trainer,
                                 Trainer::Create(mlp.graph, mlp.loss, options));
    Trainer& t = *trainers[k].trainer;
    ASSERT_LE(t.stats().launches_per_step, 2) << "not the whole step";
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer xb, testing::UploadToDevice(x));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer yb, testing::UploadToDevice(y));
    REPRISE_ASSERT_OK(t.BindInput("features", xb.data(), x.size() * sizeof(float)));
    REPRISE_ASSERT_OK(t.BindInput("labels", yb.data(), y.size() * sizeof(int32_t)));
    trainers[k].inputs.push_back(std::move(xb));
    trainers[k].inputs.push_back(std::move(yb));
    REPRISE_ASSERT_OK(t.TimeSteps(200).status());  // Warm-up, and the launch trial's steps.
  }
  for (int r = 0; r < kRounds; ++r) {
    for (Timed& timed : trainers) {
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> ms, timed.trainer->TimeSteps(kSteps));
      timed.medians.push_back(Median(ms));
    }
  }
  for (int k = 0; k < kTrainers; ++k) {
    const TrainerStats stats = trainers[k].trainer->stats();
    std::printf("trainer %d (%s launch):", k, stats.device_graph_launch ? "device" : "host");
    for (float m : trainers[k].medians) std::printf(" %.4f", m);
    std::printf("  median %.4f ms\n", Median(trainers[k].medians));
  }
  for (Timed& timed : trainers) REPRISE_ASSERT_OK(timed.trainer->Synchronize());
}

}  // namespace
}  // namespace reprise
