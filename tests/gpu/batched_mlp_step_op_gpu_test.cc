// batched_mlp_train_step's lowering alone on the GPU: from the node the fuse pass makes of a
// batched ensemble, one launch per step (any schedule, MlpSchedule) matches the
// op's CPU reference over three steps (total and per-model losses, logits, every weight and
// velocity), repeated runs give the same bits, the cooperative schedules launched on 1 or 3
// blocks (every block then runs many (model, tile) tasks, most not prefetched; the group
// schedule: on 1 or 3 groups, each training many models in turn) give the full grid's bits, and
// the group schedule gives the clusters' bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/fuse.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct OpCase {
  const char* name;
  int models;
  models::MlpConfig config;
  bool shared;        // Every model reads the same features and labels.
  bool tf32 = false;  // allow_tf32: the plan's large GEMMs run on tensor cores.
  // kAuto: the op's own lowering; otherwise that schedule on a grid of one block per SM.
  codegen::MlpSchedule schedule = codegen::MlpSchedule::kAuto;
};

// The fused graph of K models' batched training step: leaves and one batched_mlp_train_step.
absl::StatusOr<Graph> FusedEnsembleStep(const OpCase& c) {
  Graph g;
  std::vector<Value> losses;
  std::optional<Value> total;
  if (c.shared) {
    ASSIGN_OR_RETURN(Value x,
                     g.AddInput("features", {Shape{c.config.batch, c.config.input_features}}));
    ASSIGN_OR_RETURN(Value y, g.AddInput("labels", {Shape{c.config.batch}, DType::kInt32}));
    ASSIGN_OR_RETURN(
        losses, models::Ensemble(g, c.models, [&](Graph& graph, absl::string_view prefix, int) {
          Value h = x;
          for (int64_t l = 0; l < c.config.depth; ++l) {
            h = *nn::Relu(graph,
                          *nn::Linear(graph, h, c.config.width, absl::StrCat(prefix, "fc", l)));
          }
          const Value z =
              *nn::Linear(graph, h, c.config.classes, absl::StrCat(prefix, "fc", c.config.depth));
          return nn::SoftmaxCrossEntropy(graph, z, y, absl::StrCat(prefix, "loss"));
        }));
  } else {
    ASSIGN_OR_RETURN(models::MlpEnsemble e, models::BuildMlpEnsemble(c.models, c.config));
    g = std::move(e.graph);
    losses = e.losses;
    total = e.loss;  // BuildMlpEnsemble sums the losses itself.
  }
  if (!total.has_value()) {
    ASSIGN_OR_RETURN(total, models::SumLosses(g, losses));
  }
  ASSIGN_OR_RETURN(passes::BatchedGraph batched, passes::BatchEnsembles(g, *total, losses));
  ASSIGN_OR_RETURN(autodiff::TrainingGraph training,
                   autodiff::BuildTrainingGraph(
                       batched.graph, batched.loss,
                       {.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f}));
  std::vector<Value> kept = {training.loss};
  kept.insert(kept.end(), batched.kept.begin(), batched.kept.end());
  passes::FuseOptions options;
  options.whole_step_max_models = c.models;  // The op at any K, whether or not it pays.
  ASSIGN_OR_RETURN(passes::FusedTraining fused, passes::Fuse(training, kept, options));
  if (!fused.training.graph.FindNode("batched_mlp_train_step").ok()) {
    return absl::InternalError(absl::StrCat("not fused: ", fused.whole_step_declined));
  }
  return std::move(fused.training.graph);
}

class BatchedMlpStepOpGpuTest : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    const OpCase& c = GetParam();
    REPRISE_ASSERT_OK_AND_ASSIGN(device_, runtime::UseDevice(0));
    REPRISE_ASSERT_OK_AND_ASSIGN(graph_, FusedEnsembleStep(c));
    REPRISE_ASSERT_OK_AND_ASSIGN(node_, graph_.FindNode("batched_mlp_train_step"));
    cpu_ = std::make_unique<ir::ReferenceExecutor>(graph_, false, 13);
    std::mt19937 rng(17);
    std::normal_distribution<double> normal;
    for (int32_t id : graph_.NodesOf("input")) {
      const Node& n = graph_.node(id);
      if (n.outputs[0].shape.rank() == 0) continue;  // Hyperparameters keep their values.
      if (n.outputs[0].dtype == DType::kInt32) {
        std::vector<int32_t> labels(n.outputs[0].NumElements());
        for (int32_t& l : labels) l = static_cast<int32_t>(rng() % c.config.classes);
        REPRISE_ASSERT_OK(cpu_->SetLeaf(n.name, labels));
      } else {
        std::vector<double> x(n.outputs[0].NumElements());
        for (double& v : x) v = normal(rng);
        REPRISE_ASSERT_OK(cpu_->SetLeaf(n.name, x));
      }
    }
    for (const Value& v : node().inputs) {
      initial_.push_back(**cpu_->Tensor(v));
      specs_.push_back(graph_.spec(v));
    }
    for (const TensorSpec& s : node().outputs) specs_.push_back(s);
    for (const TensorSpec& s : specs_) {
      REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer b,
                                   runtime::DeviceBuffer::Create(s.bytes()));
      buffers_.push_back(std::move(b));
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
    stream_.emplace(std::move(stream));
    static runtime::KernelStore* const store = new runtime::KernelStore(device_.ArchFlag());
    kernels_ = store;
  }

  const Node& node() const { return graph_.node(node_); }
  int num_inputs() const { return static_cast<int>(node().inputs.size()); }

  // The op's own lowering (grid 0 on a kAuto case), or its plan (for `schedule` where given)
  // launched on `grid` blocks, 0: the plan's (with `phase_clock`, the kernel that stamps each
  // phase into that buffer).
  // `threads`: blocks of that many threads instead of the lowering's (0).
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> Lower(
      int grid = 0, void* phase_clock = nullptr, int threads = 0, int chain_rows = 0,
      std::optional<codegen::MlpSchedule> schedule = std::nullopt) {
    ops::LoweringContext ctx;
    ctx.kernels = kernels_;
    ctx.device = &device_;
    ctx.options.allow_tf32 = GetParam().tf32;
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      (i < num_inputs() ? ctx.inputs : ctx.outputs).push_back(buffers_[i].data());
      if (i < num_inputs()) ctx.input_specs.push_back(specs_[i]);
    }
    if (grid == 0 && !schedule.has_value() && GetParam().schedule == codegen::MlpSchedule::kAuto) {
      return ops::BatchedMlpTrainStepOp().lower(ctx, node());
    }
    const bool shared_x = specs_[0].shape.rank() == 2, shared_y = specs_[1].shape.rank() == 1;
    ASSIGN_OR_RETURN(codegen::MlpStepPlan plan, Plan(threads, chain_rows, schedule));
    if (grid == 0) grid = plan.grid();
    ops::KernelArgs args;
    for (void* p : ctx.inputs) args.Add(p);
    for (void* p : ctx.outputs) args.Add(p);
    if (phase_clock != nullptr) args.Add(phase_clock);
    return ops::LaunchForMlpStep(
        ctx, "batched_mlp_step_small_grid", plan,
        codegen::BatchedMlpStepKernel(plan, shared_x, shared_y, phase_clock != nullptr),
        std::move(args), grid);
  }

  // The plan Lower launches for these arguments.
  absl::StatusOr<codegen::MlpStepPlan> Plan(
      int threads = 0, int chain_rows = 0,
      std::optional<codegen::MlpSchedule> schedule = std::nullopt) {
    const bool shared_x = specs_[0].shape.rank() == 2;
    const int64_t models = specs_[6].shape.dim(0);
    std::vector<int64_t> widths = {specs_[0].shape.dim(specs_[0].shape.rank() - 1)};
    for (int i = 6; i + 1 < num_inputs(); i += 4) widths.push_back(specs_[i].shape.dim(1));
    codegen::MlpStepTarget target = ops::MlpTrainStepTargetFor(device_);
    target.tf32 = GetParam().tf32;
    target.schedule = schedule.value_or(GetParam().schedule);
    if (threads > 0) target.threads = threads;
    target.chain_rows = chain_rows;
    return codegen::PlanMlpStep(specs_[0].shape.dim(shared_x ? 0 : 1), widths, target, models);
  }

  // Whether the case's plan is the cluster schedule (which has no grid to vary).
  bool Clustered() {
    const absl::StatusOr<codegen::MlpStepPlan> plan = Plan();
    return plan.ok() && plan->cluster > 0;
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

  // `launches` launches back to back, timed with events: µs per launch, start latency included.
  double MicrosPerLaunch(const ops::GpuKernel& kernel, int launches) {
    auto begin = runtime::Event::Create(cudaEventDefault);
    auto end = runtime::Event::Create(cudaEventDefault);
    EXPECT_TRUE(begin.ok() && end.ok());
    if (!begin.ok() || !end.ok()) return 0;
    EXPECT_EQ(cudaEventRecord(begin->get(), stream_->get()), cudaSuccess);
    for (int i = 0; i < launches; ++i) EXPECT_TRUE(kernel.Launch(stream_->get()).ok());
    EXPECT_EQ(cudaEventRecord(end->get(), stream_->get()), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(end->get()), cudaSuccess);
    const absl::StatusOr<float> ms = runtime::ElapsedMs(*begin, *end);
    EXPECT_TRUE(ms.ok()) << ms.status();
    return ms.ok() ? 1e3 * *ms / launches : 0;
  }

  // Every written input and every output but the workspace, as bytes.
  std::vector<std::string> Snapshot() {
    std::vector<std::string> all;
    for (int i = 6; i + 1 < static_cast<int>(specs_.size()); ++i) {
      ir::HostTensor t = Download(i);
      all.emplace_back(static_cast<const char*>(t.raw()), specs_[i].bytes());
    }
    return all;
  }

  runtime::DeviceInfo device_;
  Graph graph_;
  int32_t node_ = -1;
  std::unique_ptr<ir::ReferenceExecutor> cpu_;
  std::vector<ir::HostTensor> initial_;
  std::vector<TensorSpec> specs_;  // Inputs, then outputs.
  std::vector<runtime::DeviceBuffer> buffers_;
  std::optional<runtime::Stream> stream_;
  runtime::KernelStore* kernels_ = nullptr;
};

double RelativeError(const ir::HostTensor& got, const ir::HostTensor& want) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    if (!std::isfinite(g)) return INFINITY;
    err += (g - w) * (g - w);
    norm += w * w;
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

TEST_P(BatchedMlpStepOpGpuTest, MatchesCpuReferenceOverThreeSteps) {
  ASSERT_NO_FATAL_FAILURE(Reset());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  std::printf("%s: %s\n", GetParam().name, kernel->Describe().c_str());
  // TF32 rounds every product's operands to 11 bits: relative errors of ~1e-3 in the outputs,
  // more in the velocities (small gradients of cancelling sums), little in the weights (the
  // biases, which start at 0, follow their velocities).
  const bool tf32 = GetParam().tf32;
  const double output_tolerance = tf32 ? 3e-3 : 1e-5, weight_tolerance = tf32 ? 2e-3 : 1e-5;
  const double velocity_tolerance = tf32 ? 5e-2 : 1e-2;
  const int total = num_inputs(), losses = total + 1, logits = total + 2;
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(Run(*kernel, 1));
    REPRISE_ASSERT_OK(cpu_->Run());
    for (int out : {total, losses, logits}) {
      EXPECT_LE(RelativeError(Download(out), **cpu_->Tensor(Value{node_, out - total})),
                output_tolerance)
          << "output " << out - total << ", step " << step;
    }
  }
  for (int i = 6; i + 1 < num_inputs(); ++i) {
    const bool velocity = (i - 6) % 4 >= 2;
    EXPECT_LE(RelativeError(Download(i), **cpu_->Tensor(node().inputs[i])),
              velocity ? velocity_tolerance : weight_tolerance)
        << graph_.node(node().inputs[i].node).name;
  }
}

TEST_P(BatchedMlpStepOpGpuTest, OneOrThreeBlocksGiveTheFullGridsBits) {
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan, Plan());
  if (plan.cluster > 0 && plan.groups == 0) {
    GTEST_SKIP() << "the cluster schedule's grid is one cluster per model";
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(auto full, Lower());
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*full, 3));
  const std::vector<std::string> want = Snapshot();
  // The group schedule: one group training every model in turn, or three groups (at most the
  // plan's).
  const int unit = plan.groups > 0 ? plan.cluster : 1;
  for (int grid : {unit, (plan.groups > 0 ? std::min(3, plan.groups) : 3) * unit}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto small, Lower(grid));
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(*small, 3));
    const std::vector<std::string> got = Snapshot();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(got[i] == want[i]) << "tensor " << i + 6 << " differs on " << grid << " blocks";
    }
  }
}

// The group schedule runs the cluster kernel's code with its exchanges through the workspace: the
// same sums in the same order, so the same bits as the clusters over three steps, where both have
// as many blocks per model.
TEST_P(BatchedMlpStepOpGpuTest, GroupsGiveTheClustersBits) {
  if (GetParam().schedule != codegen::MlpSchedule::kGroups) GTEST_SKIP() << "not a group case";
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan mine, Plan());
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan clustered,
                               Plan(0, 0, codegen::MlpSchedule::kCluster));
  if (mine.cluster != clustered.cluster) {
    GTEST_SKIP() << "the workspace holds exchange areas for " << mine.cluster
                 << " blocks per model, the clusters have " << clustered.cluster;
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(auto groups, Lower());
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*groups, 3));
  const std::vector<std::string> want = Snapshot();
  const ir::HostTensor want_loss = Download(num_inputs());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto clusters,
                               Lower(0, nullptr, 0, 0, codegen::MlpSchedule::kCluster));
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*clusters, 3));
  const std::vector<std::string> got = Snapshot();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << "tensor " << i + 6 << " differs";
  }
  EXPECT_EQ(std::memcmp(Download(num_inputs()).raw(), want_loss.raw(), 4), 0);
}

// Three steps from the same start give the same bits every time: the clusters' exchanges through
// distributed shared memory and the last cluster's loss sum are ordered, whatever the timing.
TEST_P(BatchedMlpStepOpGpuTest, RepeatedRunsGiveTheSameBits) {
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  std::vector<std::string> first;
  for (int run = 0; run < 3; ++run) {
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(*kernel, 3));
    std::vector<std::string> got = Snapshot();
    const ir::HostTensor loss = Download(num_inputs());
    got.emplace_back(static_cast<const char*>(loss.raw()), 4);
    if (run == 0) {
      first = std::move(got);
      continue;
    }
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(got[i] == first[i]) << "tensor " << i << " differs in run " << run;
    }
  }
}

// Not a check: prints, per phase, the median over launches of the time from the last block
// leaving the previous phase (or the first block starting) to the last block leaving this one,
// for blocks of the lowering's size and of 128 threads.
TEST_P(BatchedMlpStepOpGpuTest, DISABLED_PhaseTimes) {
  if (Clustered()) GTEST_SKIP() << "no grid phases: see DISABLED_ClusterSectionTimes";
  constexpr int kLaunches = 50;
  const int grid = device_.sm_count;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain, Lower());
  const int layers = (num_inputs() - 7) / 4;  // x, labels, 4 scalars, 4 per layer, barrier.
  const bool chain = GetParam().schedule == codegen::MlpSchedule::kRowChain ||
                     (GetParam().schedule == codegen::MlpSchedule::kAuto &&
                      GetParam().models >= codegen::kRowChainMinModels);
  const int phases = chain ? 2 : layers >= 2 ? 2 * layers - 1 : 2;
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer clock,
                               runtime::DeviceBuffer::Create((phases + 1) * grid * 8));
  // Per block size: the phases' medians, then the whole kernel's.
  std::vector<std::pair<int, std::vector<double>>> medians;
  for (int threads : {0, 128}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto stamped, Lower(grid, clock.data(), threads));
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(*stamped, 5));
    std::vector<std::vector<double>> us(phases + 1);
    std::vector<uint64_t> t((phases + 1) * grid);
    for (int i = 0; i < kLaunches; ++i) {
      ASSERT_NO_FATAL_FAILURE(Run(*stamped, 1));
      REPRISE_ASSERT_OK(cudaMemcpy(t.data(), clock.data(), t.size() * 8, cudaMemcpyDeviceToHost));
      uint64_t previous = *std::min_element(t.begin(), t.begin() + grid);
      const uint64_t start = previous;
      for (int p = 1; p <= phases; ++p) {
        const uint64_t end = *std::max_element(t.begin() + p * grid, t.begin() + (p + 1) * grid);
        us[p - 1].push_back((end - previous) / 1e3);
        previous = end;
      }
      us[phases].push_back((previous - start) / 1e3);
    }
    std::vector<double> m;
    for (std::vector<double>& v : us) {
      std::sort(v.begin(), v.end());
      m.push_back(v[v.size() / 2]);
    }
    medians.emplace_back(threads, std::move(m));
  }
  std::printf("PHASES %s: %.1f us per launch back to back (%s)\n", GetParam().name,
              MicrosPerLaunch(*plain, kLaunches), plain->Describe().c_str());
  for (const auto& [threads, m] : medians) {
    std::printf("PHASES %s, %s threads:", GetParam().name,
                threads == 0 ? "the lowering's" : absl::StrCat(threads).c_str());
    for (double v : m) std::printf(" %.1f", v);
    std::printf(" us (last: the whole kernel)\n");
  }
}

// Not a check: for the cluster schedule, the median over blocks and launches of each block's
// time in each section (the loads, each forward, the head, each backward) and in all of them.
TEST_P(BatchedMlpStepOpGpuTest, DISABLED_ClusterSectionTimes) {
  if (!Clustered()) GTEST_SKIP() << "not the cluster schedule";
  constexpr int kLaunches = 50;
  REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan, Plan());
  const int grid = plan.grid(), sections = plan.phases;
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer clock,
                               runtime::DeviceBuffer::Create((sections + 1) * grid * 8));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto stamped, Lower(grid, clock.data()));
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*stamped, 5));
  std::vector<std::vector<double>> us(sections + 1);
  std::vector<uint64_t> t((sections + 1) * grid);
  for (int i = 0; i < kLaunches; ++i) {
    ASSERT_NO_FATAL_FAILURE(Run(*stamped, 1));
    REPRISE_ASSERT_OK(cudaMemcpy(t.data(), clock.data(), t.size() * 8, cudaMemcpyDeviceToHost));
    for (int b = 0; b < grid; ++b) {
      for (int p = 1; p <= sections; ++p) {
        us[p - 1].push_back((t[p * grid + b] - t[(p - 1) * grid + b]) / 1e3);
      }
      us[sections].push_back((t[sections * grid + b] - t[b]) / 1e3);
    }
  }
  std::printf("SECTIONS %s (%s):", GetParam().name, stamped->Describe().c_str());
  for (std::vector<double>& v : us) {
    std::sort(v.begin(), v.end());
    std::printf(" %.1f", v[v.size() / 2]);
  }
  std::printf(" us (last: a block's whole run)\n");
}

// Not a check: time per launch, back to back, of the cluster and layer-phases kernels and of the
// row chain at each rows-per-task (0: the planner's choice), on the case's shapes (kAuto cases
// only).
TEST_P(BatchedMlpStepOpGpuTest, DISABLED_ScheduleTimes) {
  if (GetParam().schedule != codegen::MlpSchedule::kAuto) GTEST_SKIP() << "timed on its kAuto case";
  const std::vector<std::pair<codegen::MlpSchedule, int>> variants = {
      {codegen::MlpSchedule::kCluster, 0},     {codegen::MlpSchedule::kGroups, 0},
      {codegen::MlpSchedule::kLayerPhases, 0}, {codegen::MlpSchedule::kRowChain, 0},
      {codegen::MlpSchedule::kRowChain, 8},    {codegen::MlpSchedule::kRowChain, 16},
      {codegen::MlpSchedule::kRowChain, 32},   {codegen::MlpSchedule::kRowChain, 64}};
  for (const auto& [schedule, rows] : variants) {
    const std::string what =
        schedule == codegen::MlpSchedule::kCluster  ? std::string("clusters")
        : schedule == codegen::MlpSchedule::kGroups ? std::string("groups")
        : schedule == codegen::MlpSchedule::kLayerPhases
            ? std::string("layer phases")
            : absl::StrCat("row chain, ", rows == 0 ? "planned" : absl::StrCat(rows), " rows");
    absl::StatusOr<std::unique_ptr<ops::GpuKernel>> kernel = Lower(0, nullptr, 0, rows, schedule);
    if (!kernel.ok()) {
      std::printf("SCHEDULE %s, %s: %s\n", GetParam().name, what.c_str(),
                  kernel.status().ToString().c_str());
      continue;
    }
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(**kernel, 10));
    std::printf("SCHEDULE %s, %s: %.1f us (%s)\n", GetParam().name, what.c_str(),
                MicrosPerLaunch(**kernel, 100), (*kernel)->Describe().c_str());
  }
}

// The cases' MLPs (models::MlpConfig) and schedules, named to keep each case on one line.
constexpr models::MlpConfig kIssue9{64, 64, 2, 256, 10}, kUnaligned1{17, 33, 1, 45, 7},
    kUnaligned3{17, 33, 3, 45, 7}, kOdd{5, 3, 2, 7, 3}, kOneLayer{9, 6, 0, 1, 4};
constexpr codegen::MlpSchedule kRowChain = codegen::MlpSchedule::kRowChain,
                               kCluster = codegen::MlpSchedule::kCluster,
                               kGroups = codegen::MlpSchedule::kGroups,
                               kLayerPhases = codegen::MlpSchedule::kLayerPhases;

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchedMlpStepOpGpuTest,
    ::testing::Values(
        OpCase{"K4Issue9", 4, kIssue9, false}, OpCase{"K3OddShared", 3, kOdd, true},
        OpCase{"K6Unaligned", 6, kUnaligned1, false},
        OpCase{"K2OneLayerShared", 2, kOneLayer, true},
        OpCase{"K4Issue9Tf32", 4, kIssue9, false, true},
        OpCase{"K32Issue9Tf32", 32, kIssue9, false, true},
        OpCase{"K6UnalignedTf32", 6, kUnaligned1, false, true},
        OpCase{"K3OddSharedTf32", 3, kOdd, true, true}, OpCase{"K32Issue9", 32, kIssue9, false},
        // Each schedule where the default picks the other one.
        OpCase{"K32Issue9Tf32LayerPhases", 32, kIssue9, false, true, kLayerPhases},
        OpCase{"K4Issue9Tf32RowChain", 4, kIssue9, false, true, kRowChain},
        OpCase{"K4Issue9RowChain", 4, kIssue9, false, false, kRowChain},
        OpCase{"K3OddSharedRowChain", 3, kOdd, true, false, kRowChain},
        OpCase{"K6UnalignedRowChain", 6, kUnaligned3, false, false, kRowChain},
        OpCase{"K6UnalignedTf32RowChain", 6, kUnaligned3, false, true, kRowChain},
        OpCase{"K2OneLayerSharedRowChain", 2, kOneLayer, true, false, kRowChain},
        OpCase{"K4Issue9Tf32Cluster", 4, kIssue9, false, true, kCluster},
        OpCase{"K4Issue9Cluster", 4, kIssue9, false, false, kCluster},
        OpCase{"K3OddSharedCluster", 3, kOdd, true, false, kCluster},
        // Four layers: column-, row-, column-parallel, a row-parallel head.
        OpCase{"K6UnalignedCluster", 6, kUnaligned3, false, false, kCluster},
        OpCase{"K6UnalignedTf32Cluster", 6, kUnaligned3, false, true, kCluster},
        OpCase{"K2OneLayerSharedCluster", 2, kOneLayer, true, false, kCluster},
        // The cluster kernel in one cooperative launch (kGroups): every model at once at K = 32,
        // in rounds of the grid's groups at K = 128.
        OpCase{"K32Issue9Tf32Groups", 32, kIssue9, false, true, kGroups},
        OpCase{"K128Issue9Tf32Groups", 128, kIssue9, false, true, kGroups},
        OpCase{"K4Issue9Groups", 4, kIssue9, false, false, kGroups},
        // One hidden layer: one exchange per model (the head's partial logits), so with the two
        // exchange areas of 32 models a model's exchange uses the previous model's area.
        OpCase{"K32OneHidden512Groups", 32, {64, 64, 1, 512, 10}, false, true, kGroups},
        OpCase{"K3OddSharedGroups", 3, kOdd, true, false, kGroups},
        OpCase{"K6UnalignedGroups", 6, kUnaligned3, false, false, kGroups},
        OpCase{"K6UnalignedTf32Groups", 6, kUnaligned3, false, true, kGroups},
        OpCase{"K128Issue9Tf32", 128, kIssue9, false, true},
        OpCase{"K8Issue9Tf32", 8, kIssue9, false, true}, OpCase{"K128Issue9", 128, kIssue9, false}),
    [](const ::testing::TestParamInfo<OpCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace reprise
