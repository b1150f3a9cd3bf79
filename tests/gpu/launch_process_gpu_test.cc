// Diagnostics, run by hand (they time, so they assert no speed), for what kAuto's trial
// does not solve (capture/launch_trial.h): a step launched from the host by a kAuto trainer, during
// its trial and after it kept the host's launch, ran slower than the same step in a kHost trainer
// (reprise-bench MLP 4x1024 at batch 256 on an H200: 0.190 against 0.180 ms). Does another
// trainer's device launch in the process cause it, and does a kAuto trainer fed from the host show
// it? On an H200 on 2026-12-04, neither (0.2177 / 0.2177 / 0.2179 ms; kAuto 0.2196 against kHost
// 0.2188). One at a time, each in a process of its own:
//   reprise_gpu_tests --gtest_also_run_disabled_tests
//   --gtest_filter='LaunchProcessGpuTest.DISABLED_<name>'
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "capture/launch_trial.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

absl::StatusOr<std::unique_ptr<Trainer>> MlpTrainer(int64_t batch, int64_t width, int depth,
                                                    GraphLaunch launch) {
  ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp({.batch = batch,
                                                      .input_features = width,
                                                      .depth = depth,
                                                      .width = width,
                                                      .classes = 10}));
  TrainOptions options;
  options.launch.mode = ExecMode::kGraph;
  options.numerics.allow_tf32 = true;
  options.launch.graph_launch = launch;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(mlp.graph, mlp.loss, options));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(batch * width);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(batch);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 10);
  RETURN_IF_ERROR(trainer->SetInput("features", x));
  RETURN_IF_ERROR(trainer->SetInput("labels", y));
  return trainer;
}

// The median of three medians of `steps` steps back to back.
absl::StatusOr<float> MedianMs(Trainer& trainer, int steps) {
  std::vector<float> medians;
  for (int round = 0; round < 3; ++round) {
    ASSIGN_OR_RETURN(std::vector<float> ms, trainer.TimeSteps(steps));
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    medians.push_back(ms[ms.size() / 2]);
  }
  std::sort(medians.begin(), medians.end());
  return medians[1];
}

TEST(LaunchProcessGpuTest, DISABLED_HostStepsBeforeAndAfterADeviceLaunch) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               MlpTrainer(256, 1024, 4, GraphLaunch::kHost));
  REPRISE_ASSERT_OK(host->TimeSteps(100).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(const float before, MedianMs(*host, 1000));
  float beside = 0, after = 0;
  {
    // Another trainer's step launched from the device, alive while the host's steps run.
    REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> device,
                                 MlpTrainer(16, 32, 2, GraphLaunch::kDevice));
    REPRISE_ASSERT_OK(device->TimeSteps(20).status());
    ASSERT_TRUE(device->stats().device_graph_launch);
    REPRISE_ASSERT_OK_AND_ASSIGN(beside, MedianMs(*host, 1000));
  }
  REPRISE_ASSERT_OK(cudaDeviceSynchronize());
  REPRISE_ASSERT_OK_AND_ASSIGN(after, MedianMs(*host, 1000));
  std::printf(
      "MLP 4x1024 b256 TF32, launched from the host, median ms: %.4f before any device launch, "
      "%.4f beside a device-launched trainer, %.4f after it was destroyed\n",
      before, beside, after);
}

// kAuto's trainer of the same step, once its trial kept the host's launch, against a kHost
// trainer in the same process, before and after a re-capture (an input bound, then unbound).
TEST(LaunchProcessGpuTest, DISABLED_AutoKeptHostAgainstHostBeforeAndAfterARecapture) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               MlpTrainer(256, 1024, 4, GraphLaunch::kHost));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> automatic,
                               MlpTrainer(256, 1024, 4, GraphLaunch::kAuto));
  while (automatic->stats().graph_launch_measuring) {
    // The whole trial in one call: TimeSteps synchronizes before it starts.
    REPRISE_ASSERT_OK(automatic->TimeSteps(capture::LaunchTrial::kSteps + 2).status());
  }
  std::printf("kAuto: %s, %s\n", automatic->stats().device_graph_launch ? "device" : "host",
              automatic->stats().graph_launch_measurement.c_str());
  REPRISE_ASSERT_OK(host->TimeSteps(100).status());
  float ms[4];
  REPRISE_ASSERT_OK_AND_ASSIGN(ms[0], MedianMs(*host, 1000));
  REPRISE_ASSERT_OK_AND_ASSIGN(ms[1], MedianMs(*automatic, 1000));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer x,
                               runtime::DeviceBuffer::Create(256 * 1024 * sizeof(float)));
  REPRISE_ASSERT_OK(cudaMemset(x.data(), 0, 256 * 1024 * sizeof(float)));
  REPRISE_ASSERT_OK(cudaDeviceSynchronize());
  const int64_t captures = automatic->stats().graph_captures;
  REPRISE_ASSERT_OK(automatic->BindInput("features", x.data(), 256 * 1024 * sizeof(float)));
  REPRISE_ASSERT_OK(automatic->TimeSteps(5).status());
  REPRISE_ASSERT_OK(automatic->BindInput("features", nullptr, 0));
  REPRISE_ASSERT_OK(automatic->TimeSteps(5).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(ms[2], MedianMs(*host, 1000));
  REPRISE_ASSERT_OK_AND_ASSIGN(ms[3], MedianMs(*automatic, 1000));
  std::printf(
      "MLP 4x1024 b256 TF32, median ms: kHost %.4f, kAuto %.4f; after %lld re-captures of the "
      "kAuto trainer (launched from the %s): kHost %.4f, kAuto %.4f\n",
      ms[0], ms[1], static_cast<long long>(automatic->stats().graph_captures - captures),
      automatic->stats().device_graph_launch ? "device" : "host", ms[2], ms[3]);
}

}  // namespace
}  // namespace reprise
