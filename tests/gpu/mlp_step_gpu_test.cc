// mlp_train_step on the GPU: one launch per step (cooperative, or in clusters) matches the op's CPU
// reference over three steps, is bitwise reproducible (also on fewer blocks than planned), and a
// CUDA graph of the launch replayed 50 times equals 50 eager launches bit for bit, with the barrier
// state left ready every time. DISABLED_Time prints the median time per step over 1000 graph
// replays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/initializer.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/cpu/mlp_step_graph.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct Case {
  const char* name;
  models::MlpConfig config;
  bool tf32 = false;  // allow_tf32: the plan's large GEMMs run on tensor cores.
};

// One fused node with a device buffer per input and output, and the f32 CPU reference.
class MlpStepGpuTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    const models::MlpConfig& c = GetParam().config;
    REPRISE_ASSERT_OK_AND_ASSIGN(device_, runtime::UseDevice(0));
    const SgdOptions sgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
    REPRISE_ASSERT_OK_AND_ASSIGN(fused_, testing::BuildFusedMlpStep(c, sgd));
    cpu_ = std::make_unique<ir::ReferenceExecutor>(fused_.graph, false, 11);
    ir::FillInitial(Initializer::Uniform(-1, 1), 11, "features", **cpu_->Leaf("features"));
    std::vector<int32_t> labels(c.batch);
    for (int64_t i = 0; i < c.batch; ++i) labels[i] = (i * 7 + 1) % c.classes;
    REPRISE_ASSERT_OK(cpu_->SetLeaf("labels", labels));
    const Node& n = node();
    for (const Value& v : n.inputs) {
      initial_.push_back(**cpu_->Tensor(v));
      specs_.push_back(fused_.graph.spec(v));
    }
    for (const TensorSpec& s : n.outputs) specs_.push_back(s);
    for (const TensorSpec& s : specs_) {
      REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer b,
                                   runtime::DeviceBuffer::Create(s.bytes()));
      buffers_.push_back(std::move(b));
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
    stream_.emplace(std::move(stream));
    // One store for the whole suite: each shape's kernel compiles once.
    static runtime::KernelStore* const store = new runtime::KernelStore(device_.ArchFlag());
    kernels_ = store;
  }

  const Node& node() const { return fused_.graph.node(fused_.node); }
  int num_inputs() const { return static_cast<int>(node().inputs.size()); }
  int barrier_index() const { return num_inputs() - 1; }

  ops::LoweringContext Context() {
    ops::LoweringContext ctx;
    ctx.kernels = kernels_;
    ctx.device = &device_;
    ctx.options.allow_tf32 = GetParam().tf32;
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      (i < num_inputs() ? ctx.inputs : ctx.outputs).push_back(buffers_[i].data());
      if (i < num_inputs()) ctx.input_specs.push_back(specs_[i]);
    }
    return ctx;
  }

  // The op's own lowering (grid = 0), or the same plan launched on `grid` blocks (a cluster
  // plan keeps its grid). Sets barriers_per_launch_ from the plan.
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> Lower(int grid = 0) {
    ops::LoweringContext ctx = Context();
    std::vector<int64_t> widths = {specs_[0].shape.dim(1)};
    for (int i = 6; i < barrier_index(); i += 4) widths.push_back(specs_[i].shape.dim(0));
    ASSIGN_OR_RETURN(
        codegen::MlpStepPlan plan,
        codegen::PlanMlpStep(specs_[0].shape.dim(0), widths, ops::MlpTrainStepTargetFor(ctx)));
    barriers_per_launch_ = plan.barriers;
    if (grid == 0) return ops::MlpTrainStepOp().lower(ctx, node());
    ops::KernelArgs args;
    for (void* p : ctx.inputs) args.Add(p);
    for (void* p : ctx.outputs) args.Add(p);
    return ops::LaunchForMlpStep(ctx, "mlp_step_small_grid", plan, codegen::MlpStepKernel(plan),
                                 std::move(args), grid);
  }

  // Inputs back to their initial values; outputs poisoned with NaN bits.
  void Reset() {
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      if (i < num_inputs()) {
        REPRISE_ASSERT_OK(cudaMemcpy(buffers_[i].data(), initial_[i].raw(), specs_[i].bytes(),
                                     cudaMemcpyHostToDevice));
      } else {
        REPRISE_ASSERT_OK(cudaMemset(buffers_[i].data(), 0xff, specs_[i].bytes()));
      }
    }
    // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
    REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
  }

  void Run(const ops::GpuKernel& kernel, int steps) {
    for (int s = 0; s < steps; ++s) REPRISE_ASSERT_OK(kernel.Launch(stream_->get()));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
    REPRISE_ASSERT_OK(cudaGetLastError());
  }

  ir::HostTensor Download(int index) {
    ir::HostTensor t(specs_[index]);
    EXPECT_EQ(
        cudaMemcpy(t.raw(), buffers_[index].data(), specs_[index].bytes(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return t;
  }

  // Every written input and every output, as bytes.
  std::vector<std::string> Snapshot() {
    std::vector<std::string> all;
    for (int i = 6; i < static_cast<int>(specs_.size()); ++i) {
      ir::HostTensor t = Download(i);
      all.emplace_back(static_cast<const char*>(t.raw()), specs_[i].bytes());
    }
    return all;
  }

  // Between launches the barrier word's low 31 bits are 0 and bit 31 has flipped once per grid
  // barrier passed.
  void ExpectBarrierReady(int64_t launches) {
    ir::HostTensor b = Download(barrier_index());
    const uint32_t word = static_cast<uint32_t>(b.data<int32_t>()[0]);
    EXPECT_EQ(word & 0x7fffffffu, 0u) << "arrivals left over";
    EXPECT_EQ(word >> 31, static_cast<uint32_t>(launches * barriers_per_launch_ % 2)) << "flips";
    EXPECT_EQ(b.data<int32_t>()[1], 0) << "the cluster schedule's count of finished models";
  }

  runtime::DeviceInfo device_;
  testing::FusedMlpStep fused_;
  std::unique_ptr<ir::ReferenceExecutor> cpu_;
  std::vector<ir::HostTensor> initial_;
  std::vector<TensorSpec> specs_;  // Inputs, then outputs.
  std::vector<runtime::DeviceBuffer> buffers_;
  std::optional<runtime::Stream> stream_;
  runtime::KernelStore* kernels_ = nullptr;
  int64_t barriers_per_launch_ = 0;
};

double RelativeError(const ir::HostTensor& got, const ir::HostTensor& want) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got.data<float>()[i]) - want.data<float>()[i];
    if (std::isnan(got.data<float>()[i])) return INFINITY;
    err += d * d;
    norm += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

TEST_P(MlpStepGpuTest, MatchesCpuReferenceOverThreeSteps) {
  ASSERT_NO_FATAL_FAILURE(Reset());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  std::printf("%s: %s\n", GetParam().name, kernel->Describe().c_str());
  // TF32 rounds every product's operands to 11 bits: relative errors of ~1e-3 in the outputs,
  // more in the velocities (small gradients of cancelling sums), little in the weights.
  const bool tf32 = GetParam().tf32;
  const double output_tolerance = tf32 ? 5e-3 : 1e-5, weight_tolerance = tf32 ? 2e-3 : 1e-5;
  const double velocity_tolerance = tf32 ? 5e-2 : 1e-5;
  const int loss = num_inputs(), logits = num_inputs() + 1;
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(Run(*kernel, 1));
    REPRISE_ASSERT_OK(cpu_->Run());
    const float want = (*cpu_->Tensor(fused_.loss))->data<float>()[0];
    const float got = Download(loss).data<float>()[0];
    EXPECT_NEAR(got, want, output_tolerance * std::max(1.0f, std::abs(want)))
        << "loss, step " << step;
    EXPECT_LE(RelativeError(Download(logits), **cpu_->Tensor(fused_.logits)), output_tolerance)
        << "logits, step " << step;
  }
  for (int i = 6; i < barrier_index(); ++i) {
    const bool velocity = (i - 6) % 4 >= 2;
    EXPECT_LE(RelativeError(Download(i), **cpu_->Tensor(node().inputs[i])),
              velocity ? velocity_tolerance : weight_tolerance)
        << fused_.graph.node(node().inputs[i].node).name;
  }
  ExpectBarrierReady(3);
}

TEST_P(MlpStepGpuTest, RunsAreBitwiseIdenticalAlsoOnFewerBlocks) {
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto small, Lower(/*grid=*/3));
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*kernel, 3));
  const std::vector<std::string> first = Snapshot();
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*kernel, 3));
  const std::vector<std::string> second = Snapshot();
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*small, 3));
  const std::vector<std::string> third = Snapshot();
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i] == second[i]) << "tensor " << i + 6 << " differs between two runs";
    EXPECT_TRUE(first[i] == third[i]) << "tensor " << i + 6 << " differs on 3 blocks";
  }
}

TEST_P(MlpStepGpuTest, GraphReplaysEqualEagerLaunchesBitwise) {
  constexpr int kSteps = 50;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*kernel, kSteps));
  ExpectBarrierReady(kSteps);
  const std::vector<std::string> eager = Snapshot();
  const float loss = Download(num_inputs()).data<float>()[0];
  EXPECT_TRUE(std::isfinite(loss)) << loss;

  ASSERT_NO_FATAL_FAILURE(Reset());
  REPRISE_ASSERT_OK(cudaStreamBeginCapture(stream_->get(), cudaStreamCaptureModeThreadLocal));
  const absl::Status recorded = kernel->Launch(stream_->get());
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_->get(), &raw);
  runtime::Graph graph = runtime::Graph::Adopt(raw);
  REPRISE_ASSERT_OK(recorded);
  REPRISE_ASSERT_OK(ended);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  for (int s = 0; s < kSteps; ++s) REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream_->get()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  ExpectBarrierReady(kSteps);
  const std::vector<std::string> replayed = Snapshot();
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(eager[i] == replayed[i]) << "tensor " << i + 6 << " differs";
  }
}

// Not a check: prints the median time per step for tuning.
TEST_P(MlpStepGpuTest, DISABLED_Time) {
  constexpr int kReplays = 1000;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  ASSERT_NO_FATAL_FAILURE(Reset());
  REPRISE_ASSERT_OK(cudaStreamBeginCapture(stream_->get(), cudaStreamCaptureModeThreadLocal));
  const absl::Status recorded = kernel->Launch(stream_->get());
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_->get(), &raw);
  runtime::Graph graph = runtime::Graph::Adopt(raw);
  REPRISE_ASSERT_OK(recorded);
  REPRISE_ASSERT_OK(ended);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  for (int s = 0; s < 50; ++s) REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream_->get()));
  std::vector<runtime::Event> starts, stops;
  for (int i = 0; i < kReplays + 2; ++i) {
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event a, runtime::Event::Create(cudaEventDefault));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event b, runtime::Event::Create(cudaEventDefault));
    starts.push_back(std::move(a));
    stops.push_back(std::move(b));
  }
  for (int i = 0; i < kReplays; ++i) {
    REPRISE_ASSERT_OK(cudaEventRecord(starts[i].get(), stream_->get()));
    REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream_->get()));
    REPRISE_ASSERT_OK(cudaEventRecord(stops[i].get(), stream_->get()));
  }
  // Back to back, for the throughput of a step loop.
  REPRISE_ASSERT_OK(cudaEventRecord(starts[kReplays].get(), stream_->get()));
  for (int i = 0; i < kReplays; ++i) REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream_->get()));
  REPRISE_ASSERT_OK(cudaEventRecord(stops[kReplays].get(), stream_->get()));
  // Eager launches back to back.
  REPRISE_ASSERT_OK(cudaEventRecord(starts[kReplays + 1].get(), stream_->get()));
  for (int i = 0; i < kReplays; ++i) REPRISE_ASSERT_OK(kernel->Launch(stream_->get()));
  REPRISE_ASSERT_OK(cudaEventRecord(stops[kReplays + 1].get(), stream_->get()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  std::vector<float> us(kReplays);
  for (int i = 0; i < kReplays; ++i) {
    float ms = 0;
    REPRISE_ASSERT_OK(cudaEventElapsedTime(&ms, starts[i].get(), stops[i].get()));
    us[i] = 1000 * ms;
  }
  std::sort(us.begin(), us.end());
  float loop_ms = 0, eager_ms = 0;
  REPRISE_ASSERT_OK(cudaEventElapsedTime(&loop_ms, starts[kReplays].get(), stops[kReplays].get()));
  REPRISE_ASSERT_OK(
      cudaEventElapsedTime(&eager_ms, starts[kReplays + 1].get(), stops[kReplays + 1].get()));
  std::printf(
      "TIMING %s on %s: median %.1f us per graph replay (p10 %.1f, p90 %.1f); back to back "
      "%.1f us per replay, %.1f us per eager launch; %s\n",
      GetParam().name, device_.name.c_str(), us[kReplays / 2], us[kReplays / 10],
      us[kReplays * 9 / 10], 1000 * loop_ms / kReplays, 1000 * eager_ms / kReplays,
      kernel->Describe().c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlpStepGpuTest,
    ::testing::Values(Case{"Mlp8x256b32", {32, 256, 8, 256, 10}},
                      Case{"Tiny5x3x7x3", {5, 3, 2, 7, 3}},
                      Case{"Mlp4x1024b256", {256, 1024, 4, 1024, 10}},
                      Case{"Mlp8x256b32Tf32", {32, 256, 8, 256, 10}, true},
                      Case{"Tiny5x3x7x3Tf32", {5, 3, 2, 7, 3}, true},
                      Case{"Mlp4x1024b256Tf32", {256, 1024, 4, 1024, 10}, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace reprise
