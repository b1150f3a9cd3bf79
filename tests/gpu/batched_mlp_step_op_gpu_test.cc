// batched_mlp_train_step's lowering alone on the GPU: from the node the fuse pass makes of a
// batched ensemble, one launch per step (one cluster of blocks per model on sm_90) matches the
// op's CPU reference over three steps (total and per-model losses, logits, every weight and
// velocity), at K = 4, 32 and 128 of issue 9's shape and on odd, unaligned and shared-input
// shapes; every cluster size 1, 2, 4 and 8 matches it too and repeats its own bits; the cooperative
// form launched on 1 or 3 blocks (every block then runs many (model, tile) tasks, most not
// prefetched) gives its full grid's bits. DISABLED_TimeClusterSizes times the forms (run it with
// --gtest_also_run_disabled_tests).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
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
  bool shared;  // Every model reads the same features and labels.
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
  options.whole_step_cluster = -1;           // Its lowering: a cluster per model on sm_90.
  ASSIGN_OR_RETURN(passes::FusedTraining fused, passes::Fuse(training, kept, options));
  if (!fused.training.graph.FindNode("batched_mlp_train_step").ok()) {
    return absl::InternalError(absl::StrCat("not fused: ", fused.whole_step_declined));
  }
  return std::move(fused.training.graph);
}

// Three steps of the op's CPU reference from the initial values: per step the outputs (total and
// per-model losses, logits), then every input after the third.
struct ReferenceSteps {
  std::vector<std::vector<ir::HostTensor>> outputs;
  std::vector<ir::HostTensor> inputs;
};

class BatchedMlpStepOpGpuTest : public ::testing::TestWithParam<OpCase> {
 public:  // ExpectMatchesCpu reads the fixture.
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

  // The op's own lowering (grid 0 and cluster 0), the cooperative plan for the whole device
  // launched on `grid` blocks, or the cluster form with `cluster` blocks per model.
  // `tf32`: the op's lowering with TrainOptions::allow_tf32.
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> Lower(int grid = 0, int cluster = 0,
                                                        bool tf32 = false) {
    ops::LoweringContext ctx;
    ctx.kernels = kernels_;
    ctx.device = &device_;
    ctx.allow_tf32 = tf32;
    for (int i = 0; i < static_cast<int>(specs_.size()); ++i) {
      (i < num_inputs() ? ctx.inputs : ctx.outputs).push_back(buffers_[i].data());
      if (i < num_inputs()) ctx.input_specs.push_back(specs_[i]);
    }
    if (grid == 0 && cluster == 0) return ops::BatchedMlpTrainStepOp().lower(ctx, node());
    const bool shared_x = specs_[0].shape.rank() == 2, shared_y = specs_[1].shape.rank() == 1;
    const int64_t models = specs_[6].shape.dim(0);
    std::vector<int64_t> widths = {specs_[0].shape.dim(specs_[0].shape.rank() - 1)};
    for (int i = 6; i + 1 < num_inputs(); i += 4) widths.push_back(specs_[i].shape.dim(1));
    codegen::MlpStepTarget target = ops::MlpTrainStepTargetFor(device_);
    target.cluster = cluster;
    ASSIGN_OR_RETURN(
        codegen::MlpStepPlan plan,
        codegen::PlanMlpStep(specs_[0].shape.dim(shared_x ? 0 : 1), widths, target, models));
    ops::KernelArgs args;
    for (void* p : ctx.inputs) args.Add(p);
    for (void* p : ctx.outputs) args.Add(p);
    if (cluster > 0) {
      ASSIGN_OR_RETURN(auto kernel, ops::ClusterKernel::Create(
                                        ctx, "batched_mlp_step_cluster",
                                        codegen::BatchedMlpStepKernel(plan, shared_x, shared_y),
                                        plan.models, cluster, dim3(plan.target.threads),
                                        static_cast<unsigned>(plan.shared_bytes), std::move(args)));
      return std::unique_ptr<ops::GpuKernel>(std::move(kernel));
    }
    ASSIGN_OR_RETURN(auto kernel, ops::CooperativeKernel::Create(
                                      ctx, "batched_mlp_step_small_grid",
                                      codegen::BatchedMlpStepKernel(plan, shared_x, shared_y), grid,
                                      dim3(plan.target.threads),
                                      static_cast<unsigned>(plan.shared_bytes), std::move(args)));
    return std::unique_ptr<ops::GpuKernel>(std::move(kernel));
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

  // Every written input and every output but the workspace, as bytes.
  std::vector<std::string> Snapshot() {
    std::vector<std::string> all;
    for (int i = 6; i + 1 < static_cast<int>(specs_.size()); ++i) {
      ir::HostTensor t = Download(i);
      all.emplace_back(static_cast<const char*>(t.raw()), specs_[i].bytes());
    }
    return all;
  }

  // Three steps of the CPU reference from the initial values (the fixture's executor, once).
  const ReferenceSteps& Reference();

  runtime::DeviceInfo device_;
  Graph graph_;
  int32_t node_ = -1;
  std::unique_ptr<ir::ReferenceExecutor> cpu_;
  std::vector<ir::HostTensor> initial_;
  std::vector<TensorSpec> specs_;  // Inputs, then outputs.
  std::vector<runtime::DeviceBuffer> buffers_;
  std::optional<runtime::Stream> stream_;
  runtime::KernelStore* kernels_ = nullptr;
  std::unique_ptr<ReferenceSteps> reference_;
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

const ReferenceSteps& BatchedMlpStepOpGpuTest::Reference() {
  if (reference_ == nullptr) {
    reference_ = std::make_unique<ReferenceSteps>();
    for (int step = 0; step < 3; ++step) {
      EXPECT_TRUE(cpu_->Run().ok());
      std::vector<ir::HostTensor>& outs = reference_->outputs.emplace_back();
      for (int out = 0; out < 3; ++out) outs.push_back(**cpu_->Tensor(Value{node_, out}));
    }
    for (const Value& v : node().inputs) reference_->inputs.push_back(**cpu_->Tensor(v));
  }
  return *reference_;
}

// Three launches of `kernel` from the initial values against `want` (tolerances: relative L2 per
// tensor; velocities looser, their bias parts cancel).
struct Tolerance {
  double outputs = 1e-5, weights = 1e-5, velocities = 1e-2;
};
void ExpectMatches(BatchedMlpStepOpGpuTest& t, const ops::GpuKernel& kernel,
                   const ReferenceSteps& want, const std::string& what, Tolerance tol = {});

TEST_P(BatchedMlpStepOpGpuTest, MatchesCpuReferenceOverThreeSteps) {
  REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower());
  std::printf("%s: %s\n", GetParam().name, kernel->Describe().c_str());
  if (device_.cc_major >= 9) {
    EXPECT_THAT(kernel->Describe(), ::testing::HasSubstr("clusters="));
  }
  ExpectMatches(*this, *kernel, Reference(), "the op's lowering");
}

// Every cluster size trains every model as the CPU reference does, and a second run from the same
// start gives the same bits (no atomics in the sums, a fixed order).
TEST_P(BatchedMlpStepOpGpuTest, EveryClusterSizeMatchesCpuReferenceAndRepeatsItsBits) {
  if (device_.cc_major < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  const ReferenceSteps want = Reference();
  for (int cluster : {1, 2, 4, 8}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower(0, cluster));
    ExpectMatches(*this, *kernel, want, absl::StrCat("cluster ", cluster));
    const std::vector<std::string> first = Snapshot();
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(*kernel, 3));
    const std::vector<std::string> again = Snapshot();
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(again[i] == first[i]) << "tensor " << i + 6 << " differs between two runs, "
                                        << "cluster " << cluster;
    }
  }
}

// allow_tf32: the layers' GEMMs on TF32 tensor cores. Within TF32's rounding of the float32 CPU
// reference (operands keep 10 mantissa bits: about 1e-3 relative per GEMM), not equal to the
// float32 kernel's bits (so the tensor cores ran), and the same bits on a second run.
TEST_P(BatchedMlpStepOpGpuTest, Tf32StaysWithinTf32RoundingOfCpuReference) {
  REPRISE_ASSERT_OK_AND_ASSIGN(auto tf32, Lower(0, 0, /*tf32=*/true));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto f32, Lower());
  std::printf("%s tf32: %s\n", GetParam().name, tf32->Describe().c_str());
  ExpectMatches(*this, *tf32, Reference(), "tf32",
                {.outputs = 5e-3, .weights = 1e-3, .velocities = 1e-1});
  const std::vector<std::string> first = Snapshot();
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*tf32, 3));
  EXPECT_TRUE(Snapshot() == first) << "two TF32 runs differ";
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*f32, 3));
  EXPECT_FALSE(Snapshot() == first) << "TF32 gave the float32 kernel's bits";
}

TEST_P(BatchedMlpStepOpGpuTest, OneOrThreeBlocksGiveTheFullGridsBits) {
  REPRISE_ASSERT_OK_AND_ASSIGN(auto full, Lower(device_.sm_count));
  ASSERT_NO_FATAL_FAILURE(Reset());
  ASSERT_NO_FATAL_FAILURE(Run(*full, 3));
  const std::vector<std::string> want = Snapshot();
  for (int grid : {1, 3}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto small, Lower(grid));
    ASSERT_NO_FATAL_FAILURE(Reset());
    ASSERT_NO_FATAL_FAILURE(Run(*small, 3));
    const std::vector<std::string> got = Snapshot();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(got[i] == want[i]) << "tensor " << i + 6 << " differs on " << grid << " blocks";
    }
  }
}

// Median microseconds per launch of each form at this case's K (CUDA events around 200 launches,
// after 20, five times), printed; nothing is checked but that the launches run.
TEST_P(BatchedMlpStepOpGpuTest, DISABLED_TimeClusterSizes) {
  ASSERT_NO_FATAL_FAILURE(Reset());
  std::vector<std::pair<std::string, std::unique_ptr<ops::GpuKernel>>> forms;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto cooperative, Lower(device_.sm_count));
  forms.emplace_back("cooperative", std::move(cooperative));
  for (int cluster : {1, 2, 4, 8}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto kernel, Lower(0, cluster));
    forms.emplace_back(absl::StrCat("cluster ", cluster), std::move(kernel));
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event start, runtime::Event::Create(cudaEventDefault));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event stop, runtime::Event::Create(cudaEventDefault));
  for (auto& [name, kernel] : forms) {
    ASSERT_NO_FATAL_FAILURE(Run(*kernel, 20));
    std::vector<float> us;
    for (int round = 0; round < 5; ++round) {
      REPRISE_ASSERT_OK(cudaEventRecord(start.get(), stream_->get()));
      for (int i = 0; i < 200; ++i) REPRISE_ASSERT_OK(kernel->Launch(stream_->get()));
      REPRISE_ASSERT_OK(cudaEventRecord(stop.get(), stream_->get()));
      REPRISE_ASSERT_OK(cudaEventSynchronize(stop.get()));
      float ms = 0;
      REPRISE_ASSERT_OK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      us.push_back(ms * 1000 / 200);
    }
    std::sort(us.begin(), us.end());
    std::printf("TIME %s K=%d %-12s %8.2f us per launch (min %.2f, max %.2f)  %s\n",
                GetParam().name, GetParam().models, name.c_str(), us[2], us[0], us[4],
                kernel->Describe().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchedMlpStepOpGpuTest,
                         ::testing::Values(OpCase{"K4Issue9", 4, {64, 64, 2, 256, 10}, false},
                                           OpCase{"K32Issue9", 32, {64, 64, 2, 256, 10}, false},
                                           OpCase{"K128Issue9", 128, {64, 64, 2, 256, 10}, false},
                                           OpCase{"K3OddShared", 3, {5, 3, 2, 7, 3}, true},
                                           OpCase{"K6Unaligned", 6, {17, 33, 1, 45, 7}, false},
                                           OpCase{"K2OneLayerShared", 2, {9, 6, 0, 1, 4}, true}),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return std::string(info.param.name);
                         });

void ExpectMatches(BatchedMlpStepOpGpuTest& t, const ops::GpuKernel& kernel,
                   const ReferenceSteps& want, const std::string& what, Tolerance tol) {
  ASSERT_NO_FATAL_FAILURE(t.Reset());
  const int total = t.num_inputs();
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(t.Run(kernel, 1));
    for (int out = 0; out < 3; ++out) {
      EXPECT_LE(RelativeError(t.Download(total + out), want.outputs[step][out]), tol.outputs)
          << what << ": output " << out << ", step " << step;
    }
  }
  for (int i = 6; i + 1 < t.num_inputs(); ++i) {
    const bool velocity = (i - 6) % 4 >= 2;
    EXPECT_LE(RelativeError(t.Download(i), want.inputs[i]), velocity ? tol.velocities : tol.weights)
        << what << ": " << t.graph_.node(t.node().inputs[i].node).name;
  }
}

}  // namespace
}  // namespace reprise
