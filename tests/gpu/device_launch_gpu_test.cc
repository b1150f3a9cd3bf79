// Device graph launch (TrainOptions::launch.graph_launch, capture/device_launch.h): the step's
// graph tail-launched by a one-node launcher graph trains bit for bit as the host-launched graph,
// step by step, with the loss read right after Step() being that step's, with the learning rate and
// input bindings changed between steps and with the executable instantiated anew; every change of
// the executable is uploaded again; and a graph the device cannot launch is refused, naming the
// node.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capture/device_launch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Model {
  Graph graph;
  Value loss;
  std::string features;   // "features" or "images".
  int64_t feature_count;  // Elements of one batch of it.
  int64_t batch, classes;
};

absl::StatusOr<Model> Mlp() {
  ASSIGN_OR_RETURN(
      models::Mlp mlp,
      models::BuildMlp({.batch = 16, .input_features = 24, .depth = 3, .width = 32, .classes = 5}));
  return Model{std::move(mlp.graph), mlp.loss, "features", 16 * 24, 16, 5};
}

absl::StatusOr<Model> ResNet18Nhwc() {
  ASSIGN_OR_RETURN(
      models::ResNet net,
      models::BuildResNet(
          {.depth = 18, .batch = 2, .classes = 10, .image_size = 32, .layout = Layout::kNHWC}));
  return Model{std::move(net.graph), net.loss, "images", 2 * 32 * 32 * 3, 2, 10};
}

struct Config {
  const char* name;
  std::function<absl::StatusOr<Model>()> build;
  bool fuse = true;
  bool whole_step = true;
  int lanes = 0;
};

void PrintTo(const Config& config, std::ostream* os) { *os << config.name; }

// The whole-step MLP kernel, the per-layer MLP on two lanes (fork/join branches in the graph), the
// MLP unfused (one launch per op), and a convolutional network (cuDNN and cuBLASLt on two lanes).
const Config kConfigs[] = {
    {"mlp_whole_step", Mlp, true, true, 0},
    {"mlp_per_layer_two_lanes", Mlp, true, false, 2},
    {"mlp_unfused", Mlp, false, false, 1},
    {"resnet18_nhwc", ResNet18Nhwc, true, true, 2},
};

TrainOptions OptionsFor(const Config& config, bool device_launch) {
  TrainOptions options;
  options.launch.mode = ExecMode::kGraph;
  options.kernels.fuse = config.fuse;
  options.kernels.whole_step = config.whole_step;
  options.launch.lanes = config.lanes;
  options.numerics.deterministic = true;  // Two trainers, the same bits.
  options.seed = 11;
  options.launch.graph_launch = device_launch ? GraphLaunch::kDevice : GraphLaunch::kHost;
  return options;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

std::vector<Batch> MakeBatches(const Model& m, int count) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(m.classes) - 1);
  std::vector<Batch> batches(count);
  for (Batch& b : batches) {
    b.x.resize(m.feature_count);
    for (float& v : b.x) v = normal(rng);
    b.y.resize(m.batch);
    for (int32_t& v : b.y) v = label(rng);
  }
  return batches;
}

void ExpectSameParameters(Trainer& want, Trainer& got) {
  const std::vector<std::string> names = want.ParameterNames();
  ASSERT_FALSE(names.empty());
  ASSERT_EQ(names, got.ParameterNames());
  for (const std::string& name : names) {
    auto a = want.GetParameter(name);
    auto b = got.GetParameter(name);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*a, *b) << name;  // Bit for bit (float ==; no NaNs in a healthy step).
  }
}

class DeviceLaunchGpuTest : public ::testing::TestWithParam<Config> {};

// 24 steps, each read right after Step(): device launch gives the host launch's loss every step
// (so the read waited for the tail-launched step, not just the launcher), and the same parameters.
TEST_P(DeviceLaunchGpuTest, SameLossesAndParametersAsHostLaunch) {
  REPRISE_REQUIRE_GPU();
  const Config& config = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, false)));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> device,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, true)));
  const int kSteps = 24;
  const std::vector<Batch> batches = MakeBatches(model, kSteps);
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    for (Trainer* t : {host.get(), device.get()}) {
      REPRISE_ASSERT_OK(t->SetInput(model.features, batches[step].x));
      REPRISE_ASSERT_OK(t->SetInput("labels", batches[step].y));
      REPRISE_ASSERT_OK(t->Step());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float device_loss, device->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float host_loss, host->Loss());
    EXPECT_EQ(device_loss, host_loss);
    losses.push_back(host_loss);
  }
  // Each batch is new, so a stale read (the step before's loss) could not pass as this one's.
  for (int step = 1; step < kSteps; ++step) EXPECT_NE(losses[step], losses[step - 1]) << step;
  ExpectSameParameters(*host, *device);

  const TrainerStats d = device->stats(), h = host->stats();
  EXPECT_EQ(d.graph_replays, kSteps);
  EXPECT_EQ(d.graph_nodes, h.graph_nodes);  // The same step graph; only who launches it differs.
  EXPECT_EQ(d.graph_captures, 1);
  EXPECT_EQ(d.graph_instantiations, 1);
  EXPECT_EQ(d.graph_uploads, 1);  // Once after instantiation; nothing changed since.
  EXPECT_EQ(h.graph_uploads, 0);
}

// Verify() replays its own capture of the step launched the way the trainer launches it (from the
// device here) and finds it bitwise equal to the eager run, leaving the trainer's state as it was.
TEST_P(DeviceLaunchGpuTest, VerifyComparesTheDeviceLaunchedStepWithEager) {
  REPRISE_REQUIRE_GPU();
  const Config& config = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> device,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, true)));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, false)));
  const std::vector<Batch> batches = MakeBatches(model, 2);
  for (Trainer* t : {host.get(), device.get()}) {
    REPRISE_ASSERT_OK(t->SetInput(model.features, batches[0].x));
    REPRISE_ASSERT_OK(t->SetInput("labels", batches[0].y));
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, device->Verify(3));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 3);
  // Verify changed nothing: the next step is the host-launched trainer's, bit for bit.
  for (Trainer* t : {host.get(), device.get()}) REPRISE_ASSERT_OK(t->Step());
  ExpectSameParameters(*host, *device);
}

// Steps queued back to back, nothing read between them: each tail-launched step starts after the
// one before has finished (a device graph still running cannot be launched again), and CUDA events
// around a step time the step itself, not only its one-node launcher.
TEST_P(DeviceLaunchGpuTest, QueuedStepsAndEventsWaitForTheTailLaunchedStep) {
  REPRISE_REQUIRE_GPU();
  const Config& config = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, false)));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> device,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, true)));
  const std::vector<Batch> batches = MakeBatches(model, 1);
  for (Trainer* t : {host.get(), device.get()}) {
    REPRISE_ASSERT_OK(t->SetInput(model.features, batches[0].x));
    REPRISE_ASSERT_OK(t->SetInput("labels", batches[0].y));
    for (int i = 0; i < 20; ++i) REPRISE_ASSERT_OK(t->Step());
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const float device_loss, device->Loss());
  REPRISE_ASSERT_OK_AND_ASSIGN(const float host_loss, host->Loss());
  EXPECT_EQ(device_loss, host_loss);
  ExpectSameParameters(*host, *device);

  // compute-sanitizer instruments host- and device-launched kernels differently, so the two
  // timings below compare nothing there (tools/device/gpu_suite_sanitized.sh sets this).
  if (testing::UnderComputeSanitizer()) {
    GTEST_SKIP() << "the steps' order and bits checked; their timing means nothing under "
                    "compute-sanitizer";
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> host_ms, host->TimeSteps(20));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> device_ms, device->TimeSteps(20));
  std::sort(host_ms.begin(), host_ms.end());
  std::sort(device_ms.begin(), device_ms.end());
  // The launcher alone takes a few microseconds; the step it launches, what the host launch takes.
  EXPECT_GE(device_ms[10], 0.5f * host_ms[10])
      << "host-launched median " << host_ms[10] << " ms, device-launched " << device_ms[10];
}

// The learning rate and input bindings changed between steps: the device-launched step sees each
// change (rebinding patches the executable and uploads it again) and keeps the host launch's bits;
// so does kAuto's, whose first 18 steps launch from both (each rebinding patching both
// executables, capture/launch_trial.h).
TEST_P(DeviceLaunchGpuTest, LearningRateAndBindingsBetweenStepsKeepTheBits) {
  REPRISE_REQUIRE_GPU();
  const Config& config = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, false)));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> device,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, true)));
  TrainOptions automatic_options = OptionsFor(config, false);
  automatic_options.launch.graph_launch = GraphLaunch::kAuto;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> automatic,
                               Trainer::Create(model.graph, model.loss, automatic_options));
  const int kBuffers = 3, kSteps = 25;  // Past kAuto's trial before the re-capture.
  const std::vector<Batch> batches = MakeBatches(model, kBuffers);
  // Device copies of each batch's features, to bind by pointer.
  std::vector<std::shared_ptr<runtime::DeviceBuffer>> bound;
  for (const Batch& b : batches) {
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer buffer,
                                 runtime::DeviceBuffer::Create(b.x.size() * sizeof(float)));
    REPRISE_ASSERT_OK(
        cudaMemcpy(buffer.data(), b.x.data(), b.x.size() * sizeof(float), cudaMemcpyHostToDevice));
    bound.push_back(std::make_shared<runtime::DeviceBuffer>(std::move(buffer)));
  }
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
  const float rates[] = {0.02f, 0.005f, 0.01f};
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    const int i = step % kBuffers;
    for (Trainer* t : {host.get(), device.get(), automatic.get()}) {
      REPRISE_ASSERT_OK(t->SetLearningRate(rates[(step / 2) % 3]));
      if (step == kSteps - 3) {
        // Unbound again (a re-capture) and fed by SetInput.
        REPRISE_ASSERT_OK(t->BindInput(model.features, nullptr, 0));
        REPRISE_ASSERT_OK(t->SetInput(model.features, batches[i].x));
      } else if (step < kSteps - 3) {
        REPRISE_ASSERT_OK(
            t->BindInput(model.features, bound[i]->data(), batches[i].x.size() * sizeof(float)));
      }
      REPRISE_ASSERT_OK(t->SetInput("labels", batches[i].y));
      REPRISE_ASSERT_OK(t->Step());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float device_loss, device->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float host_loss, host->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float automatic_loss, automatic->Loss());
    EXPECT_EQ(device_loss, host_loss);
    EXPECT_EQ(automatic_loss, host_loss);
  }
  ExpectSameParameters(*host, *device);
  ExpectSameParameters(*host, *automatic);
  const TrainerStats a = automatic->stats();
  if (a.graph_nodes >= capture::CapturedStep::kAutoDeviceLaunchMinNodes) {
    EXPECT_THAT(a.graph_launch_measurement, HasSubstr("measured over 6 steps each"));
  } else {
    EXPECT_EQ(a.graph_launch_measurement, "");
  }

  const TrainerStats d = device->stats(), h = host->stats();
  // The same update paths as the host launch, each followed by an upload.
  EXPECT_EQ(d.graph_captures, h.graph_captures);
  EXPECT_EQ(d.graph_node_updates, h.graph_node_updates);
  EXPECT_GE(d.graph_node_updates, kSteps - 5);  // Every rebinding after the first.
  EXPECT_EQ(d.graph_exec_updates + d.graph_instantiations,
            h.graph_exec_updates + h.graph_instantiations);
  EXPECT_EQ(d.graph_uploads, d.graph_instantiations + d.graph_exec_updates + d.graph_node_updates);
}

INSTANTIATE_TEST_SUITE_P(Models, DeviceLaunchGpuTest, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

// A forced re-instantiation gives the step a new executable, which needs a new launcher and an
// upload; the steps after it keep the host launch's bits.
TEST(DeviceLaunchRecaptureGpuTest, ReinstantiatedStepIsLaunchedFromTheDeviceToo) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, Mlp());
  const Config& config = kConfigs[1];
  REPRISE_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Trainer::Impl> host,
      Trainer::Impl::Create(model.graph, model.loss, OptionsFor(config, false)));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Trainer::Impl> device,
      Trainer::Impl::Create(model.graph, model.loss, OptionsFor(config, true)));
  const std::vector<Batch> batches = MakeBatches(model, 4);
  using Apply = capture::CapturedStep::Apply;
  const Apply applies[] = {Apply::kInstantiate, Apply::kUpdateElseInstantiate, Apply::kInstantiate,
                           Apply::kUpdateElseInstantiate};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(step);
    for (Trainer::Impl* t : {host.get(), device.get()}) {
      REPRISE_ASSERT_OK(t->SetInput(model.features, batches[step].x.data(), batches[step].x.size(),
                                    DType::kFloat32));
      REPRISE_ASSERT_OK(
          t->SetInput("labels", batches[step].y.data(), batches[step].y.size(), DType::kInt32));
      REPRISE_ASSERT_OK(t->Step());
      if (t == device.get()) REPRISE_ASSERT_OK(t->ForceRecapture(applies[step]));
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> want, host->ReadFloat(host->loss()));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> got, device->ReadFloat(device->loss()));
    EXPECT_EQ(want, got);
  }
  for (const std::string& name : host->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> want, host->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> got, device->GetParameter(name));
    EXPECT_EQ(want, got) << name;
  }
  const TrainerStats d = device->stats();
  EXPECT_EQ(d.graph_instantiations, 3);  // At Create, then the two forced.
  EXPECT_EQ(d.graph_exec_updates, 2);
  EXPECT_EQ(d.graph_uploads, 5);
  EXPECT_EQ(d.graph_replays, 4);
}

// The default, GraphLaunch::kAuto, launches a step of many nodes that the device can launch from
// the device, then times it from both in the first steps (capture/launch_trial.h) and keeps the
// faster: the same losses and parameters as the host launch all along, and the report says what
// was measured and chosen.
TEST(DeviceLaunchAutoGpuTest, DefaultMeasuresBothLaunchesWithTheHostLaunchsBits) {
  REPRISE_REQUIRE_GPU();
  const Config& config = kConfigs[3];  // ResNet-18 on two lanes: hundreds of nodes.
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> host,
                               Trainer::Create(model.graph, model.loss, OptionsFor(config, false)));
  TrainOptions options = OptionsFor(config, false);
  options.launch.graph_launch = TrainOptions{}.launch.graph_launch;
  ASSERT_EQ(options.launch.graph_launch, GraphLaunch::kAuto);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> automatic,
                               Trainer::Create(model.graph, model.loss, options));
  EXPECT_TRUE(automatic->stats().graph_launch_measuring);
  EXPECT_THAT(automatic->stats().graph_launch_measurement, HasSubstr("step 0 of 18"));
  // Past the trial's 18 steps; the Loss() of each waits, so the verdict comes a step later.
  auto step_both = [&](const std::vector<Batch>& batches) {
    for (const Batch& batch : batches) {
      for (Trainer* t : {host.get(), automatic.get()}) {
        REPRISE_ASSERT_OK(t->SetInput(model.features, batch.x));
        REPRISE_ASSERT_OK(t->SetInput("labels", batch.y));
        REPRISE_ASSERT_OK(t->Step());
      }
      REPRISE_ASSERT_OK_AND_ASSIGN(const float want, host->Loss());
      REPRISE_ASSERT_OK_AND_ASSIGN(const float got, automatic->Loss());
      EXPECT_EQ(got, want);
    }
  };
  step_both(MakeBatches(model, capture::LaunchTrial::kSteps + 2));
  ExpectSameParameters(*host, *automatic);
  const TrainerStats a = automatic->stats();
  EXPECT_FALSE(a.graph_launch_measuring);
  EXPECT_THAT(a.graph_launch_measurement,
              AllOf(HasSubstr("measured over 6 steps each"), HasSubstr("from the host"),
                    HasSubstr("from the device")));
  EXPECT_EQ(a.graph_uploads, 1);
  if (a.device_graph_launch) {
    EXPECT_EQ(a.host_launch_reason, "");
    EXPECT_THAT(automatic->Report().ToText(),
                AllOf(HasSubstr("launched from the device (uploads 1)"),
                      HasSubstr("    launch measured over 6 steps each")));
  } else {
    EXPECT_THAT(a.host_launch_reason, HasSubstr("faster from the host (measured over 6 steps"));
    EXPECT_THAT(automatic->Report().ToText(), HasSubstr("launched from the host (faster"));
  }
  EXPECT_FALSE(host->stats().device_graph_launch);
  EXPECT_EQ(host->stats().graph_launch_measurement, "");
  // Replays after the verdict keep the bits whichever launch it kept.
  step_both(MakeBatches(model, 2));
  ExpectSameParameters(*host, *automatic);
}

// kAuto launches a step of few nodes (the whole-step MLP: an input copy and one kernel) from the
// host, and says why.
TEST(DeviceLaunchAutoGpuTest, SmallStepIsLaunchedFromTheHostSayingWhy) {
  REPRISE_REQUIRE_GPU();
  const Config& config = kConfigs[0];
  REPRISE_ASSERT_OK_AND_ASSIGN(const Model model, config.build());
  TrainOptions options = OptionsFor(config, false);
  options.launch.graph_launch = GraphLaunch::kAuto;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                               Trainer::Create(model.graph, model.loss, options));
  REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK(trainer->Synchronize());
  const TrainerStats s = trainer->stats();
  EXPECT_FALSE(s.device_graph_launch);
  EXPECT_LT(s.graph_nodes, capture::CapturedStep::kAutoDeviceLaunchMinNodes);
  EXPECT_THAT(s.host_launch_reason,
              HasSubstr(absl::StrCat("nodes, fewer than ",
                                     capture::CapturedStep::kAutoDeviceLaunchMinNodes)));
  EXPECT_EQ(s.graph_uploads, 0);
  EXPECT_THAT(trainer->Report().ToText(), HasSubstr("launched from the host ("));
}

// A step that enqueues a host function (a host node once captured).
class HostFunctionKernel : public ops::GpuKernel {
 public:
  absl::Status Launch(cudaStream_t stream) const override {
    return runtime::CudaStatus(cudaLaunchHostFunc(
                                   stream, [](void*) {}, nullptr),
                               "cudaLaunchHostFunc", "test");
  }
  std::string Describe() const override { return "host function"; }
};

// kAuto takes the host launch where the device refuses a graph large enough to try, keeps the
// reason, and replays.
TEST(DeviceLaunchAutoGpuTest, RefusedGraphFallsBackToHostLaunchSayingWhy) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  std::vector<capture::LoweredLaunch> launches;
  for (int i = 0; i < capture::CapturedStep::kAutoDeviceLaunchMinNodes; ++i) {
    launches.push_back({"host_function", 0, {}, std::make_unique<HostFunctionKernel>()});
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(capture::Lanes lanes, capture::Lanes::Create(launches));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      capture::CapturedStep step,
      capture::CapturedStep::Capture(launches, lanes, stream.get(),
                                     capture::CapturedStep::Launch::kAuto));
  EXPECT_EQ(step.launch(), capture::CapturedStep::Launch::kHost);
  EXPECT_THAT(step.host_launch_reason(),
              AllOf(HasSubstr("the device refused the graph"), HasSubstr("host node")));
  EXPECT_EQ(step.uploads(), 0);
  REPRISE_ASSERT_OK(step.Replay(stream.get()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
  // Asked for explicitly, the device launch is refused instead.
  EXPECT_EQ(capture::CapturedStep::Capture(launches, lanes, stream.get(),
                                           capture::CapturedStep::Launch::kDevice)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// A step of memsets (memset nodes once captured, which the device can launch).
class MemsetKernel : public ops::GpuKernel {
 public:
  explicit MemsetKernel(void* target) : target_(target) {}
  absl::Status Launch(cudaStream_t stream) const override {
    return runtime::CudaStatus(cudaMemsetAsync(target_, 1, 256, stream), "cudaMemsetAsync", "test");
  }
  std::string Describe() const override { return "memset"; }

 private:
  void* target_;
};

// kAuto's trial on a step of kAutoDeviceLaunchMinNodes nodes: it measures and decides within its
// 18 replays and one that finds them done, replaying throughout; a re-capture during a trial
// starts it over.
TEST(DeviceLaunchAutoGpuTest, TrialDecidesAndARecaptureStartsItOver) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(256));
  std::vector<capture::LoweredLaunch> launches;
  for (int i = 0; i < capture::CapturedStep::kAutoDeviceLaunchMinNodes; ++i) {
    launches.push_back({"memset", 0, {}, std::make_unique<MemsetKernel>(buffer.data())});
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(capture::Lanes lanes, capture::Lanes::Create(launches));
  for (const bool recapture : {false, true}) {
    SCOPED_TRACE(recapture ? "re-captured during the trial" : "trial to its end");
    REPRISE_ASSERT_OK_AND_ASSIGN(
        capture::CapturedStep step,
        capture::CapturedStep::Capture(launches, lanes, stream.get(),
                                       capture::CapturedStep::Launch::kAuto));
    EXPECT_TRUE(step.launch_measuring());
    EXPECT_EQ(step.launch(), capture::CapturedStep::Launch::kDevice);
    const int before = recapture ? 5 : 0;  // Replays before the re-capture.
    for (int r = 0; r < before; ++r) REPRISE_ASSERT_OK(step.Replay(stream.get()));
    if (recapture) {
      for (const auto apply : {capture::CapturedStep::Apply::kUpdateElseInstantiate,
                               capture::CapturedStep::Apply::kInstantiate}) {
        REPRISE_ASSERT_OK(step.Recapture(launches, lanes, stream.get(), apply));
        EXPECT_EQ(step.launch_measurement(), "measuring both launches: step 0 of 18");
      }
    }
    for (int r = 0; r < capture::LaunchTrial::kSteps; ++r) {
      REPRISE_ASSERT_OK(step.Replay(stream.get()));
    }
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
    EXPECT_TRUE(step.launch_measuring());
    REPRISE_ASSERT_OK(step.Replay(stream.get()));  // Finds the trial's last block done.
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
    EXPECT_FALSE(step.launch_measuring());
    EXPECT_EQ(step.replays(), before + capture::LaunchTrial::kSteps + 1);
    EXPECT_THAT(step.launch_measurement(), HasSubstr("measured over 6 steps each"));
    EXPECT_EQ(step.host_launch_reason().empty(),
              step.launch() == capture::CapturedStep::Launch::kDevice);
  }
}

// Graphs the device cannot launch are refused, naming CUDA's reason and the node.
TEST(DeviceLaunchInstantiateGpuTest, HostNodeIsRefusedNamingIt) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Graph graph, runtime::Graph::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(256));
  cudaMemsetParams memset = {};
  memset.dst = buffer.data();
  memset.elementSize = 1;
  memset.width = 256;
  memset.height = 1;
  cudaGraphNode_t first = nullptr, host_node = nullptr;
  REPRISE_ASSERT_OK(cudaGraphAddMemsetNode(&first, graph.get(), nullptr, 0, &memset));
  cudaHostNodeParams host = {};
  host.fn = [](void*) {};
  REPRISE_ASSERT_OK(cudaGraphAddHostNode(&host_node, graph.get(), &first, 1, &host));
  const absl::StatusOr<runtime::GraphExec> exec = capture::InstantiateForDeviceLaunch(graph);
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kFailedPrecondition) << exec.status();
  EXPECT_THAT(exec.status().message(),
              AllOf(HasSubstr("TrainOptions::launch.graph_launch"), HasSubstr("host node"),
                    HasSubstr("cannot be instantiated for launch from the device")));
  // Nothing left behind for the next launch to report.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(DeviceLaunchInstantiateGpuTest, CopyFromPageableHostMemoryIsRefusedNamingIt) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Graph graph, runtime::Graph::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(4096));
  std::vector<char> pageable(4096, 1);
  cudaGraphNode_t copy = nullptr;
  REPRISE_ASSERT_OK(cudaGraphAddMemcpyNode1D(&copy, graph.get(), nullptr, 0, buffer.data(),
                                             pageable.data(), pageable.size(),
                                             cudaMemcpyHostToDevice));
  const absl::StatusOr<runtime::GraphExec> exec = capture::InstantiateForDeviceLaunch(graph);
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kFailedPrecondition) << exec.status();
  EXPECT_THAT(exec.status().message(),
              AllOf(HasSubstr("memcpy node"), HasSubstr("4096 bytes from pageable host memory")));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(DeviceLaunchInstantiateGpuTest, KernelAndCopyNodesAreAccepted) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Graph graph, runtime::Graph::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer a, runtime::DeviceBuffer::Create(4096));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer b, runtime::DeviceBuffer::Create(4096));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::PinnedBuffer pinned, runtime::PinnedBuffer::Create(4096));
  cudaGraphNode_t from_host = nullptr, copy = nullptr;
  REPRISE_ASSERT_OK(cudaGraphAddMemcpyNode1D(&from_host, graph.get(), nullptr, 0, a.data(),
                                             pinned.data(), 4096, cudaMemcpyDefault));
  REPRISE_ASSERT_OK(cudaGraphAddMemcpyNode1D(&copy, graph.get(), &from_host, 1, b.data(), a.data(),
                                             4096, cudaMemcpyDeviceToDevice));
  REPRISE_ASSERT_OK(capture::InstantiateForDeviceLaunch(graph).status());
}

}  // namespace
}  // namespace reprise
