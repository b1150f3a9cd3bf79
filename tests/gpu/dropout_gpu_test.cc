// Dropout on the GPU: the kernel draws the CPU reference's masks bit for bit; inside a captured
// step every replay draws a new mask (the device advances its own step counter) and the replays
// give the bits of the bulked run.
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

TEST(DropoutGpuTest, KernelDrawsTheCpuMasksBitForBit) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddParameter("x", {Shape{333, 77}}, Initializer::Uniform(-1, 1));
  Value dy = *g.AddParameter("dy", {Shape{333, 77}}, Initializer::Uniform(-1, 1));
  Value y = *nn::Dropout(g, x, 0.35, "drop", 12345);
  const Node& drop = g.node(y.node);
  ASSERT_TRUE(g.AddOp1(ops::DropoutGradOp(), "drop.grad", {dy, drop.inputs[1]}, drop.attrs).ok());
  ir::ReferenceExecutor cpu(g, false, 4);
  // A counter with both words set, so both reach the generator.
  ASSERT_TRUE(cpu.SetLeaf(autodiff::kStepCounter, std::vector<int32_t>{-7, 3}).ok());
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

constexpr int kBatch = 32, kFeatures = 16, kClasses = 4;

struct Model {
  Graph graph;
  Value loss, dropped;
};

Model DropoutMlp() {
  Model m;
  Graph& g = m.graph;
  Value x = *g.AddInput("features", {Shape{kBatch, kFeatures}});
  Value h = *nn::Relu(g, *nn::Linear(g, x, 64, "fc0"), "fc0.relu");
  m.dropped = *nn::Dropout(g, h, 0.25, "drop", 99);
  Value labels = *g.AddInput("labels", {Shape{kBatch}, DType::kInt32});
  m.loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, m.dropped, kClasses, "fc1"), labels, "loss");
  return m;
}

std::unique_ptr<Trainer> MakeTrainer(const Model& m, ExecMode mode) {
  TrainOptions options;
  options.launch.mode = mode;
  options.seed = 8;
  options.fetch = {m.dropped};
  auto t = Trainer::Create(m.graph, m.loss, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<bool>> masks;  // Zeros of the dropout output, per step.
};

TrainRun Train(Trainer& t, const Model& m, int steps) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> y(kBatch);
    for (int i = 0; i < kBatch; ++i) y[i] = (x[i * kFeatures] > 0) + 2 * (x[i * kFeatures + 1] > 0);
    EXPECT_TRUE(t.SetInput("features", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    run.losses.push_back(*t.Loss());
    std::vector<float> dropped = *t.Read(m.dropped);
    std::vector<bool> zeros;
    for (float v : dropped) zeros.push_back(v == 0);
    run.masks.push_back(zeros);
  }
  return run;
}

TEST(DropoutGpuTest, ReplaysDrawNewMasksAndMatchTheBulkedRun) {
  REPRISE_REQUIRE_GPU();
  const Model m = DropoutMlp();
  auto graph = MakeTrainer(m, ExecMode::kGraph);
  auto bulked = MakeTrainer(m, ExecMode::kBulked);
  ASSERT_TRUE(graph && bulked);
  const TrainRun a = Train(*graph, m, 50), b = Train(*bulked, m, 50);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.masks, b.masks);
  for (int s = 1; s < 50; ++s) EXPECT_NE(a.masks[s], a.masks[s - 1]) << "step " << s;
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
  EXPECT_EQ(graph->stats().graph_replays, 50);
}

TEST(DropoutGpuTest, StepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  const Model m = DropoutMlp();
  auto gpu = MakeTrainer(m, ExecMode::kGraph);
  ASSERT_TRUE(gpu);
  auto training = autodiff::BuildTrainingGraph(m.graph, m.loss, SgdOptions{});
  ASSERT_TRUE(training.ok());
  ir::ReferenceExecutor cpu(training->graph, false, 8);
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  for (int s = 0; s < 4; ++s) {
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> y(kBatch, s % kClasses);
    ASSERT_TRUE(gpu->SetInput("features", x).ok());
    ASSERT_TRUE(gpu->SetInput("labels", y).ok());
    ASSERT_TRUE(gpu->Step().ok());
    ASSERT_TRUE(cpu.SetLeaf("features", std::vector<double>(x.begin(), x.end())).ok());
    ASSERT_TRUE(cpu.SetLeaf("labels", y).ok());
    ASSERT_TRUE(cpu.Run().ok());
    const float want = (*cpu.Tensor(m.loss))->data<float>()[0];
    EXPECT_NEAR(*gpu->Loss(), want, 1e-5f * std::max(1.0f, std::abs(want))) << "step " << s;
    // The same mask: zeros in the same places.
    const std::vector<float> got = *gpu->Read(m.dropped);
    auto ref = (*cpu.Tensor(m.dropped))->data<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i] == 0, ref[i] == 0) << "step " << s << " element " << i;
    }
  }
}

}  // namespace
}  // namespace reprise
