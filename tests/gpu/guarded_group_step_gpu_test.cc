// The group schedule of batched_mlp_train_step under the non-finite guard, the op's lowering alone
// on the GPU, 32 issue-9 MLPs: the guarded lowering launches the group schedule (its description
// names the group plan's grid and shared memory, not the row chain's); a NaN feature in one
// model's batch, or a label outside the classes (a NaN loss, every gradient finite), skips the
// whole step (the ensemble is one training graph with one check: no model's weights move) and
// counts it; the clean steps around it train bit for bit as the unguarded group kernel fed only
// the clean batches; one group or three, each training many models in turn, give the full grid's
// bits; kStop skips every step from the first non-finite one and records it. The layer phases
// and the row chain skip a step on any grid too, and the cluster schedule across its two waves of
// clusters. Every schedule double-buffers (the fused node's shadow): the parameters are read after
// the op's Settle.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/ops/mlp_step_double_buffer.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/fuse.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int kModels = 32;
const models::MlpConfig kConfig{
    .batch = 64, .input_features = 64, .depth = 2, .width = 256, .classes = 10};
constexpr int kLayers = 3;                 // kConfig.depth + 1.
constexpr int kBarrier = 6 + 4 * kLayers;  // The node's barrier input.

// The fused step of the 32-model ensemble under `policy`: its graph and its
// batched_mlp_train_step node.
struct FusedStep {
  Graph graph;
  int32_t node = -1;
};

absl::StatusOr<FusedStep> Fuse(NonFinitePolicy policy) {
  ASSIGN_OR_RETURN(models::MlpEnsemble e, models::BuildMlpEnsemble(kModels, kConfig));
  ASSIGN_OR_RETURN(passes::BatchedGraph batched, passes::BatchEnsembles(e.graph, e.loss, e.losses));
  OptimizerOptions sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 0.01f;
  ASSIGN_OR_RETURN(autodiff::TrainingGraph training,
                   autodiff::BuildTrainingGraphWith(batched.graph, batched.loss, sgd, {},
                                                    NonFiniteOptions{.policy = policy}));
  std::vector<Value> kept = {training.loss};
  kept.insert(kept.end(), batched.kept.begin(), batched.kept.end());
  passes::FuseOptions options;
  options.whole_step_max_models = kModels;
  ASSIGN_OR_RETURN(passes::FusedTraining fused, passes::Fuse(training, kept, options));
  FusedStep out;
  out.graph = std::move(fused.training.graph);
  absl::StatusOr<int32_t> node = out.graph.FindNode("batched_mlp_train_step");
  if (!node.ok())
    return absl::InternalError(absl::StrCat("not fused: ", fused.whole_step_declined));
  out.node = *node;
  return out;
}

// One fused step's node on the device: its inputs and outputs in device buffers.
class DeviceStep {
 public:
  absl::Status Init(NonFinitePolicy policy, const runtime::DeviceInfo& device,
                    runtime::KernelStore* kernels) {
    ASSIGN_OR_RETURN(fused_, Fuse(policy));
    policy_ = policy;
    device_ = &device;
    kernels_ = kernels;
    ir::ReferenceExecutor init(fused_.graph, false, 13);
    const Node& n = node();
    for (const Value& v : n.inputs) {
      ASSIGN_OR_RETURN(const ir::HostTensor* t, init.Tensor(v));
      specs_.push_back(fused_.graph.spec(v));
      initial_.push_back(*t);
    }
    inputs_ = static_cast<int>(specs_.size());
    for (const TensorSpec& s : n.outputs) specs_.push_back(s);
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      ASSIGN_OR_RETURN(runtime::DeviceBuffer b, runtime::DeviceBuffer::Create(specs_[i].bytes()));
      buffers_.push_back(std::move(b));
      if (i < inputs_) {
        RETURN_IF_ERROR(runtime::CudaStatus(cudaMemcpy(buffers_[i].data(), initial_[i].raw(),
                                                       specs_[i].bytes(), cudaMemcpyHostToDevice),
                                            "cudaMemcpy"));
      } else {
        RETURN_IF_ERROR(runtime::CudaStatus(cudaMemset(buffers_[i].data(), 0xff, specs_[i].bytes()),
                                            "cudaMemset"));
      }
    }
    // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
    return runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
  }

  const Node& node() const { return fused_.graph.node(fused_.node); }
  const TensorSpec& spec(int i) const { return specs_[i]; }
  int inputs() const { return inputs_; }
  void* data(int i) { return buffers_[i].data(); }

  // Input i (< kBarrier: the step's tensors and parameters) from `other`'s.
  absl::Status CopyInput(int i, DeviceStep& other) {
    return runtime::CudaStatus(
        cudaMemcpy(data(i), other.data(i), specs_[i].bytes(), cudaMemcpyDeviceToDevice),
        "cudaMemcpy");
  }

  ops::LoweringContext Context() {
    ops::LoweringContext ctx;
    ctx.kernels = kernels_;
    ctx.device = device_;
    ctx.options.allow_tf32 = true;
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      (i < inputs_ ? ctx.inputs : ctx.outputs).push_back(data(i));
      if (i < inputs_) ctx.input_specs.push_back(specs_[i]);
    }
    return ctx;
  }

  // The op's own lowering.
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> Lower() {
    return ops::BatchedMlpTrainStepOp().lower(Context(), node());
  }

  // The plan of the op's lowering for `schedule`, under this step's guard (`guarded`: its policy,
  // kSkipStep or kStop).
  absl::StatusOr<codegen::MlpStepPlan> Plan(codegen::MlpSchedule schedule, bool guarded) const {
    codegen::MlpStepTarget target = ops::MlpTrainStepTargetFor(*device_);
    target.tf32 = true;
    target.schedule = schedule;
    target.guard = !guarded                            ? codegen::MlpGuard::kNone
                   : policy_ == NonFinitePolicy::kStop ? codegen::MlpGuard::kStop
                                                       : codegen::MlpGuard::kSkip;
    target.shadow = guarded;  // The fused node's shadow input.
    std::vector<int64_t> widths = {kConfig.input_features};
    for (int l = 0; l <= kConfig.depth; ++l)
      widths.push_back(l < kConfig.depth ? kConfig.width : kConfig.classes);
    return codegen::PlanMlpStep(kConfig.batch, widths, target, kModels);
  }

  // The plan of `schedule` (guarded or not, as this step's node) launched on `grid` blocks.
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> LowerOnGrid(
      int grid, codegen::MlpSchedule schedule = codegen::MlpSchedule::kGroups,
      bool guarded = true) {
    ASSIGN_OR_RETURN(const codegen::MlpStepPlan plan, Plan(schedule, guarded));
    ops::LoweringContext ctx = Context();
    ops::KernelArgs args;
    for (void* p : ctx.inputs) args.Add(p);
    for (void* p : ctx.outputs) args.Add(p);
    ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> step,
                     ops::LaunchForMlpStep(ctx, "guarded_step_on_a_grid", plan,
                                           codegen::BatchedMlpStepKernel(plan, false, false),
                                           std::move(args), grid));
    if (!plan.double_buffered) return step;
    ops::MlpStepBuffers buffers{.barrier = data(kBarrier),
                                .shadow = data(kBarrier + 3),
                                .skipped_steps = data(kBarrier + 1),
                                .record = data(kBarrier + 2)};
    for (int l = 0; l < kLayers; ++l) {
      const int first = 6 + 4 * l;  // W, b, W's velocity and b's.
      buffers.layers.push_back({data(first), data(first + 1), data(first + 2), data(first + 3)});
    }
    return ops::DoubleBufferedMlpStep::Create(ctx, "guarded_step_on_a_grid", plan, buffers,
                                              std::move(step));
  }

  // The bytes of input i.
  std::string Bytes(int i) {
    std::string out(specs_[i].bytes(), '\0');
    EXPECT_EQ(cudaMemcpy(out.data(), data(i), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  // Every parameter and velocity.
  std::vector<std::string> Parameters() {
    std::vector<std::string> all;
    for (int i = 6; i < kBarrier; ++i) all.push_back(Bytes(i));
    return all;
  }
  std::vector<int32_t> Ints(int i) {
    std::vector<int32_t> out(specs_[i].NumElements());
    EXPECT_EQ(cudaMemcpy(out.data(), data(i), specs_[i].bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  FusedStep fused_;
  NonFinitePolicy policy_ = NonFinitePolicy::kSkipStep;
  const runtime::DeviceInfo* device_ = nullptr;
  runtime::KernelStore* kernels_ = nullptr;
  std::vector<TensorSpec> specs_;
  std::vector<ir::HostTensor> initial_;
  std::vector<runtime::DeviceBuffer> buffers_;
  int inputs_ = 0;
};

enum class Poison { kNone, kNanFeature, kBadLabel };

// Batch `step` of every model into `s`; model 5's is poisoned as asked.
absl::Status Feed(DeviceStep& s, int step, Poison poison = Poison::kNone) {
  std::mt19937 rng(500 + step);
  std::normal_distribution<float> normal;
  std::vector<float> x(s.spec(0).NumElements());
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(s.spec(1).NumElements());
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(rng() % kConfig.classes);
  const size_t model5 = 5 * static_cast<size_t>(kConfig.batch);
  if (poison == Poison::kNanFeature) {
    x[(model5 + 3) * kConfig.input_features + 7] = std::numeric_limits<float>::quiet_NaN();
  }
  if (poison == Poison::kBadLabel) y[model5 + 9] = kConfig.classes;
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpy(s.data(0), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpy(s.data(1), y.data(), y.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  // The copies may still be in flight on the legacy stream, which the step's stream does not wait
  // for.
  return runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
}

// Steps 0 and 3 clean, 1 a NaN feature of model 5, 2 a label of model 5 outside the classes (its
// loss NaN, every gradient finite), each followed by the kernel's Settle: a skipped step leaves
// every parameter and velocity as it was, bit for bit, and is counted; the clean steps give the
// unguarded kernel's bits (parameters, the losses and the logits: outputs 0 to 2), which sees them
// only.
void ExpectSkippedStepsLeaveTheBits(DeviceStep& guarded, const ops::GpuKernel& guarded_kernel,
                                    DeviceStep& plain, const ops::GpuKernel& plain_kernel,
                                    cudaStream_t stream) {
  auto launch = [&](const ops::GpuKernel& kernel) {
    REPRISE_ASSERT_OK(kernel.Launch(stream));
    REPRISE_ASSERT_OK(kernel.Settle(stream));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream));
    REPRISE_ASSERT_OK(cudaGetLastError());
  };
  std::vector<std::string> before = guarded.Parameters();
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const Poison poison = step == 1   ? Poison::kNanFeature
                          : step == 2 ? Poison::kBadLabel
                                      : Poison::kNone;
    REPRISE_ASSERT_OK(Feed(guarded, step, poison));
    ASSERT_NO_FATAL_FAILURE(launch(guarded_kernel));
    if (poison == Poison::kNone) {
      REPRISE_ASSERT_OK(Feed(plain, step));
      ASSERT_NO_FATAL_FAILURE(launch(plain_kernel));
      EXPECT_TRUE(guarded.Parameters() == plain.Parameters()) << "not the unguarded bits";
      for (int out = 0; out < 3; ++out) {
        EXPECT_EQ(guarded.Bytes(guarded.inputs() + out), plain.Bytes(plain.inputs() + out))
            << "output " << out;
      }
    } else {
      EXPECT_TRUE(guarded.Parameters() == before) << "a parameter moved on a skipped step";
    }
    before = guarded.Parameters();
    const int skipped = step < 1 ? 0 : step == 1 ? 1 : 2;
    EXPECT_EQ(guarded.Ints(kBarrier + 1), std::vector<int32_t>{skipped});
    EXPECT_EQ(guarded.Ints(kBarrier + 2), (std::vector<int32_t>{step + 1, step < 1 ? 0 : 2}));
  }
}

class GuardedGroupStepGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK_AND_ASSIGN(device_, runtime::UseDevice(0));
    static runtime::KernelStore* const store = new runtime::KernelStore(device_.ArchFlag());
    kernels_ = store;
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
    stream_.emplace(std::move(stream));
  }

  // One step; `settle`: then the op's Settle, so that the parameters' own buffers hold them.
  void Launch(const ops::GpuKernel& kernel, bool settle = true) {
    REPRISE_ASSERT_OK(kernel.Launch(stream_->get()));
    if (settle) REPRISE_ASSERT_OK(kernel.Settle(stream_->get()));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
    REPRISE_ASSERT_OK(cudaGetLastError());
  }

  runtime::DeviceInfo device_;
  runtime::KernelStore* kernels_ = nullptr;
  std::optional<runtime::Stream> stream_;
};

TEST_F(GuardedGroupStepGpuTest, PoisonedModelSkipsTheStepAndCleanStepsMatchTheUnguardedKernel) {
  DeviceStep guarded, plain;
  REPRISE_ASSERT_OK(guarded.Init(NonFinitePolicy::kSkipStep, device_, kernels_));
  REPRISE_ASSERT_OK(plain.Init(NonFinitePolicy::kIgnore, device_, kernels_));
  ASSERT_EQ(guarded.inputs(), kBarrier + 4);  // The barrier, the guard's counters, the shadow.
  ASSERT_EQ(plain.inputs(), kBarrier + 1);
  for (int i = 0; i < kBarrier; ++i) {
    ASSERT_EQ(guarded.spec(i), plain.spec(i)) << "input " << i;
    REPRISE_ASSERT_OK(plain.CopyInput(i, guarded));  // The same starting weights.
  }
  // The group schedule runs under the guard: the launch is the group plan's, whose grid or shared
  // memory differs from the row chain's.
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan groups,
                               guarded.Plan(codegen::MlpSchedule::kAuto, true));
  ASSERT_GT(groups.groups, 0) << "the guarded plan is not the group schedule";
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan chain,
                               guarded.Plan(codegen::MlpSchedule::kRowChain, true));
  const std::string group_launch =
      absl::StrCat("grid=", groups.grid(), " block=256 smem=", groups.shared_bytes);
  ASSERT_NE(group_launch,
            absl::StrCat("grid=", chain.grid(), " block=256 smem=", chain.shared_bytes));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto guarded_kernel, guarded.Lower());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain_kernel, plain.Lower());
  EXPECT_THAT(guarded_kernel->Describe(), HasSubstr(group_launch));
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plain_plan,
                               plain.Plan(codegen::MlpSchedule::kAuto, false));
  EXPECT_THAT(plain_kernel->Describe(),
              HasSubstr(absl::StrCat("grid=", plain_plan.grid(), " block=256")));
  ASSERT_EQ(plain_plan.cluster, groups.cluster);

  ExpectSkippedStepsLeaveTheBits(guarded, *guarded_kernel, plain, *plain_kernel, stream_->get());
}

// One group training all 32 models in turn, or three groups: the full grid's bits, the skipped
// step included (decided by whichever block finishes last). No Settle between the steps: the
// third reads the parameters from the shadow, where the first wrote them and the skipped second
// left them.
TEST_F(GuardedGroupStepGpuTest, OneOrThreeGroupsGiveTheFullGridsBits) {
  DeviceStep full;
  REPRISE_ASSERT_OK(full.Init(NonFinitePolicy::kSkipStep, device_, kernels_));
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan,
                               full.Plan(codegen::MlpSchedule::kGroups, true));
  ASSERT_TRUE(plan.double_buffered);
  REPRISE_ASSERT_OK_AND_ASSIGN(auto full_kernel, full.LowerOnGrid(plan.grid()));
  for (int step = 0; step < 3; ++step) {
    REPRISE_ASSERT_OK(Feed(full, step, step == 1 ? Poison::kNanFeature : Poison::kNone));
    ASSERT_NO_FATAL_FAILURE(Launch(*full_kernel, /*settle=*/step == 2));
  }
  const std::vector<std::string> want = full.Parameters();
  for (int groups : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(groups, " groups"));
    DeviceStep small;
    REPRISE_ASSERT_OK(small.Init(NonFinitePolicy::kSkipStep, device_, kernels_));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, small.LowerOnGrid(groups * plan.cluster));
    for (int step = 0; step < 3; ++step) {
      REPRISE_ASSERT_OK(Feed(small, step, step == 1 ? Poison::kNanFeature : Poison::kNone));
      ASSERT_NO_FATAL_FAILURE(Launch(*kernel, /*settle=*/step == 2));
    }
    EXPECT_TRUE(small.Parameters() == want);
    EXPECT_EQ(small.Ints(kBarrier + 1), std::vector<int32_t>{1});
  }
}

// kStop, on the op's own lowering (the group schedule) and on the cluster schedule: the first
// non-finite step and every one after it are skipped and counted; the record names the first.
TEST_F(GuardedGroupStepGpuTest, StopSkipsEveryStepFromTheFirstNonFiniteOne) {
  for (bool clusters : {false, true}) {
    SCOPED_TRACE(clusters ? "clusters" : "groups");
    DeviceStep s;
    REPRISE_ASSERT_OK(s.Init(NonFinitePolicy::kStop, device_, kernels_));
    std::unique_ptr<ops::GpuKernel> kernel;
    if (clusters) {
      REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan,
                                   s.Plan(codegen::MlpSchedule::kCluster, true));
      REPRISE_ASSERT_OK_AND_ASSIGN(
          kernel, s.LowerOnGrid(plan.grid(), codegen::MlpSchedule::kCluster, true));
    } else {
      REPRISE_ASSERT_OK_AND_ASSIGN(kernel, s.Lower());
    }
    REPRISE_ASSERT_OK(Feed(s, 0));
    ASSERT_NO_FATAL_FAILURE(Launch(*kernel));
    const std::vector<std::string> before = s.Parameters();
    for (int step = 1; step < 3; ++step) {
      REPRISE_ASSERT_OK(Feed(s, step, step == 1 ? Poison::kNanFeature : Poison::kNone));
      ASSERT_NO_FATAL_FAILURE(Launch(*kernel));
    }
    EXPECT_TRUE(s.Parameters() == before);
    EXPECT_EQ(s.Ints(kBarrier + 1), std::vector<int32_t>{2});
    EXPECT_EQ(s.Ints(kBarrier + 2), (std::vector<int32_t>{3, 2}));
  }
}

// `schedule` under the guard, which adds no grid barrier to it, on `grid` blocks (0: its plan's),
// against the unguarded kernel of the same schedule and grid.
void ExpectScheduleSkipsSteps(codegen::MlpSchedule schedule, int grid,
                              const runtime::DeviceInfo& device, runtime::KernelStore* kernels,
                              cudaStream_t stream) {
  DeviceStep guarded, plain;
  REPRISE_ASSERT_OK(guarded.Init(NonFinitePolicy::kSkipStep, device, kernels));
  REPRISE_ASSERT_OK(plain.Init(NonFinitePolicy::kIgnore, device, kernels));
  for (int i = 0; i < kBarrier; ++i) REPRISE_ASSERT_OK(plain.CopyInput(i, guarded));
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan, guarded.Plan(schedule, true));
  ASSERT_EQ(plan.cluster > 0, schedule == codegen::MlpSchedule::kCluster);
  ASSERT_EQ(plan.groups, 0);
  const int blocks = grid == 0 ? plan.grid() : grid;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto guarded_kernel, guarded.LowerOnGrid(blocks, schedule, true));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain_kernel, plain.LowerOnGrid(blocks, schedule, false));
  ExpectSkippedStepsLeaveTheBits(guarded, *guarded_kernel, plain, *plain_kernel, stream);
}

// The layer phases and the row chain (each step's verdict deferred to the next one's blocks) on
// their full grid and on 1 or 3 blocks (many tasks per block).
TEST_F(GuardedGroupStepGpuTest, CooperativeSchedulesRestoreASkippedStepOnAnyGrid) {
  for (codegen::MlpSchedule schedule :
       {codegen::MlpSchedule::kLayerPhases, codegen::MlpSchedule::kRowChain}) {
    for (int grid : {0, 1, 3}) {
      SCOPED_TRACE(
          absl::StrCat(schedule == codegen::MlpSchedule::kRowChain ? "row chain" : "layer phases",
                       ", grid ", grid));
      ExpectScheduleSkipsSteps(schedule, grid, device_, kernels_, stream_->get());
    }
  }
}

// The cluster schedule, double-buffered: no launch-wide wait, and the 32 models' clusters (of 4
// blocks, 30 to a wave on an H100 or H200) run in two waves. Every block, of either wave, arrives
// on the guard word; the last one decides and flips the parity, so a later wave still reads and
// writes the buffers the step started with.
TEST_F(GuardedGroupStepGpuTest, ClusterScheduleSkipsAStepAcrossItsWaves) {
  ExpectScheduleSkipsSteps(codegen::MlpSchedule::kCluster, 0, device_, kernels_, stream_->get());
}

}  // namespace
}  // namespace reprise
