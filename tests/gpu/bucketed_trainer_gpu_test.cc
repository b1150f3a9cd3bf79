// Shape buckets on the GPU: steps of three buckets in any order are one training run, bit for bit
// the run of three separate trainers that hand their weights and optimizer state on after every
// step; each bucket's graph is captured once and only replayed; three buckets take at most 1.1x
// the device memory of the largest bucket alone; verify mode passes on a bucket; a batch padded
// to a bucket (labels nn::kPaddingLabel, masked loss) trains as the batch alone.
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/masked_loss.h"
#include "src/runtime/device.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/trust_test_models.h"

namespace reprise {
namespace {

using ::reprise::testing::SameBits;
using ::reprise::testing::ScopedTempDir;
using ::testing::HasSubstr;

constexpr int64_t kFeatures = 12, kClasses = 4;

// The dropout MLP of the trust tests at any batch: same layers, same parameters.
absl::StatusOr<BucketModel> DropoutMlpAt(int64_t batch) {
  BucketModel m;
  Graph& g = m.graph;
  Value x = *g.AddInput("features", {Shape{batch, kFeatures}, DType::kFloat32});
  Value y = *g.AddInput("labels", {Shape{batch}, DType::kInt32});
  Value h = *nn::Relu(g, *nn::Linear(g, x, 32, "fc0"));
  h = *nn::Dropout(g, h, 0.2, "drop0", /*seed=*/11);
  h = *nn::Relu(g, *nn::Linear(g, h, 32, "fc1"));
  m.loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, h, kClasses, "fc2"), y, "loss");
  return m;
}

TrainOptions Options() {
  testing::TrustModel shape;  // Only its kind matters: an MLP.
  return testing::TrustOptions(shape);
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch BatchOf(int64_t batch, int step) {
  std::mt19937 rng(500 + step);
  std::normal_distribution<float> normal;
  Batch b{std::vector<float>(batch * kFeatures), std::vector<int32_t>(batch)};
  for (float& v : b.x) v = normal(rng);
  for (int32_t& v : b.y) v = static_cast<int32_t>(rng() % kClasses);
  return b;
}

const std::vector<int64_t> kBuckets = {8, 16, 32};
const std::vector<int64_t> kSchedule = {16, 8, 32, 32, 16, 8, 8, 32, 16, 32, 8, 16};

TEST(BucketedTrainerGpuTest, StepsOfAnyBucketsAreOneRunAsSeparateTrainersHandingStateOn) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed,
                               BucketedTrainer::Create(DropoutMlpAt, kBuckets, Options()));
  std::vector<std::unique_ptr<Trainer>> alone;
  for (int64_t batch : kBuckets) {
    REPRISE_ASSERT_OK_AND_ASSIGN(BucketModel m, DropoutMlpAt(batch));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto t, Trainer::Create(m.graph, m.loss, Options()));
    alone.push_back(std::move(t));
  }
  ScopedTempDir dir;
  const std::string state = dir.path() + "/state.safetensors";
  REPRISE_ASSERT_OK(alone[0]->SaveWeights(state));  // The same initial weights as every bucket's.
  for (size_t s = 0; s < kSchedule.size(); ++s) {
    const int64_t batch = kSchedule[s];
    const Batch b = BatchOf(batch, static_cast<int>(s));
    REPRISE_ASSERT_OK(bucketed->SetInput("features", b.x));
    REPRISE_ASSERT_OK(bucketed->SetInput("labels", b.y));
    EXPECT_EQ(bucketed->batch(), batch);
    REPRISE_ASSERT_OK(bucketed->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, bucketed->Loss());

    Trainer& t = *alone[std::find(kBuckets.begin(), kBuckets.end(), batch) - kBuckets.begin()];
    REPRISE_ASSERT_OK(t.LoadWeights(state));  // Parameters, moments and the step counter.
    REPRISE_ASSERT_OK(t.SetInput("features", b.x));
    REPRISE_ASSERT_OK(t.SetInput("labels", b.y));
    REPRISE_ASSERT_OK(t.Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float expected, t.Loss());
    REPRISE_ASSERT_OK(t.SaveWeights(state));
    EXPECT_TRUE(SameBits(loss, expected))
        << "step " << s << " (batch " << batch << "): " << loss << " vs " << expected;
  }
  const int64_t last = kSchedule.back();
  Trainer& t = *alone[std::find(kBuckets.begin(), kBuckets.end(), last) - kBuckets.begin()];
  for (const std::string& name : bucketed->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> got, bucketed->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> want, t.GetParameter(name));
    EXPECT_TRUE(SameBits(got, want)) << name;
    // Every bucket reads the same parameter.
    for (int64_t batch : kBuckets) {
      REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * bucket, bucketed->Bucket(batch));
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> seen, bucket->GetParameter(name));
      EXPECT_TRUE(SameBits(seen, got)) << name << " in bucket " << batch;
    }
  }
  // The optimizer state and the step counter too: the whole saved state agrees.
  const std::string mine = dir.path() + "/bucketed.safetensors";
  REPRISE_ASSERT_OK(bucketed->SaveWeights(mine));
  EXPECT_EQ(testing::ReadFile(mine), testing::ReadFile(state));
}

TEST(BucketedTrainerGpuTest, EachBucketIsCapturedOnceAndReplayedAndTheReportSaysSo) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed,
                               BucketedTrainer::Create(DropoutMlpAt, kBuckets, Options()));
  for (size_t s = 0; s < kSchedule.size(); ++s) {
    const Batch b = BatchOf(kSchedule[s], static_cast<int>(s));
    REPRISE_ASSERT_OK(bucketed->SetInput("features", b.x));
    REPRISE_ASSERT_OK(bucketed->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(bucketed->Step());
  }
  REPRISE_ASSERT_OK(bucketed->SetLearningRate(1e-3f));  // A scalar: no capture, no update.
  REPRISE_ASSERT_OK(bucketed->Step());
  REPRISE_ASSERT_OK(bucketed->Synchronize());
  const BucketedReport report = bucketed->Report();
  ASSERT_EQ(report.buckets.size(), 3u);
  for (const BucketedReport::Bucket& b : report.buckets) {
    const int64_t steps = std::count(kSchedule.begin(), kSchedule.end(), b.batch) +
                          (b.batch == kSchedule.back() ? 1 : 0);
    const TrainerStats& s = b.report.stats;
    EXPECT_EQ(s.steps, steps) << b.batch;
    EXPECT_EQ(s.graph_replays, steps) << b.batch;
    EXPECT_EQ(s.graph_captures, 1) << b.batch;
    EXPECT_EQ(s.graph_instantiations, 1) << b.batch;
    EXPECT_EQ(s.graph_exec_updates, 0) << b.batch;
    ASSERT_EQ(b.report.graphs.size(), 1u);
    EXPECT_EQ(b.report.graphs[0].name, absl::StrCat("step[batch=", b.batch, "]"));
    EXPECT_EQ(b.report.graphs[0].replays, steps);
  }
  const std::string text = report.ToText();
  EXPECT_THAT(text, HasSubstr("graph 'step[batch=8]'"));
  EXPECT_THAT(text, HasSubstr("graph 'step[batch=32]'"));
}

TEST(BucketedTrainerGpuTest, ASizeOfNoBucketIsRefusedListingTheBuckets) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed,
                               BucketedTrainer::Create(DropoutMlpAt, kBuckets, Options()));
  const Batch b = BatchOf(12, 0);
  const absl::Status status = bucketed->SetInput("features", b.x);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("96 (batch 8), 192 (batch 16), 384 (batch 32)"));
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t bucket, bucketed->PadToBucket(12));
  EXPECT_EQ(bucket, 16);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> x, PadRows(b.x, 12, bucket));
  REPRISE_ASSERT_OK(bucketed->SetInput("features", x));
  EXPECT_EQ(bucketed->batch(), 16);
}

TEST(BucketedTrainerGpuTest, BucketsWhoseParametersDifferAreRefused) {
  REPRISE_REQUIRE_GPU();
  const BucketBuilder widening = [](int64_t batch) -> absl::StatusOr<BucketModel> {
    BucketModel m;
    Value x = *m.graph.AddInput("features", {Shape{batch, kFeatures}, DType::kFloat32});
    Value y = *m.graph.AddInput("labels", {Shape{batch}, DType::kInt32});
    Value h = *nn::Relu(m.graph, *nn::Linear(m.graph, x, batch, "fc0"));
    m.loss = *nn::SoftmaxCrossEntropy(m.graph, *nn::Linear(m.graph, h, kClasses, "fc1"), y);
    return m;
  };
  const absl::Status status = BucketedTrainer::Create(widening, {8, 16}, Options()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fc0.weight"));
}

TEST(BucketedTrainerGpuTest, VerifyModePassesOnABucketOfTheSharedArena) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed,
                               BucketedTrainer::Create(DropoutMlpAt, kBuckets, Options()));
  for (int64_t batch : kBuckets) {
    const Batch b = BatchOf(batch, 1);
    REPRISE_ASSERT_OK(bucketed->SetInput("features", b.x));
    REPRISE_ASSERT_OK(bucketed->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(bucketed->Step());
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * bucket, bucketed->Bucket(16));
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult result, bucket->Verify(20));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 20);
}

// Device memory: three buckets within 1.1x the largest bucket's trainer alone, measured, apart
// from the lanes' workspaces: those are backed as far as the chosen algorithms need, and buckets
// of other batch sizes may choose algorithms that need more (their high-water mark is shared).
TEST(BucketedTrainerGpuTest, ThreeBucketsTakeAtMostATenthMoreDeviceMemoryThanTheLargestAlone) {
  REPRISE_REQUIRE_GPU();
  const std::vector<int64_t> batches = {256, 512, 1024};
  const BucketBuilder mlp = [](int64_t batch) -> absl::StatusOr<BucketModel> {
    absl::StatusOr<models::Mlp> m = models::BuildMlp(
        {.batch = batch, .input_features = 1024, .depth = 4, .width = 1024, .classes = 10});
    if (!m.ok()) return m.status();
    return BucketModel{std::move(m->graph), m->loss};
  };
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t idle, runtime::DeviceMemoryInUse());
  int64_t alone_bytes = 0, alone_arena = 0, alone_workspaces = 0;
  {
    REPRISE_ASSERT_OK_AND_ASSIGN(BucketModel m, mlp(batches.back()));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto t, Trainer::Create(m.graph, m.loss, Options()));
    REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t used, runtime::DeviceMemoryInUse());
    alone_bytes = used - idle;
    alone_arena = t->stats().arena_bytes;
    alone_workspaces = t->stats().workspace_bytes;
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t idle_again, runtime::DeviceMemoryInUse());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed, BucketedTrainer::Create(mlp, batches, Options()));
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t used, runtime::DeviceMemoryInUse());
  const int64_t bucketed_bytes = used - idle_again;
  const BucketMemory memory = bucketed->memory();
  EXPECT_EQ(memory.largest_alone_bytes, alone_arena);
  EXPECT_LE(memory.arena_bytes, alone_arena * 11 / 10);
  REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * largest, bucketed->Bucket(batches.back()));
  const int64_t workspaces = largest->stats().workspace_bytes;  // Shared by the buckets.
  EXPECT_LE(bucketed_bytes - workspaces, (alone_bytes - alone_workspaces) * 11 / 10)
      << "three buckets " << bucketed_bytes << " bytes (workspaces " << workspaces
      << "), batch 1024 alone " << alone_bytes << " (workspaces " << alone_workspaces << ")";
  std::printf(
      "device memory: three buckets %.1f MiB (arena %.1f), batch 1024 alone %.1f MiB "
      "(arena %.1f)\n",
      bucketed_bytes / 1048576.0, memory.arena_bytes / 1048576.0, alone_bytes / 1048576.0,
      alone_arena / 1048576.0);
}

TEST(BucketedTrainerGpuTest, MaskedLossAndGradientMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value z = *g.AddParameter("z", {Shape{70, 45}}, Initializer::Uniform(-4, 4));
  Value labels = *g.AddInput("labels", {Shape{70}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}}, Initializer::Constant(1.5));
  ASSERT_TRUE(g.AddOp1(ops::MaskedSoftmaxCrossEntropyOp(), "xent", {z, labels}).ok());
  ASSERT_TRUE(
      g.AddOp1(ops::MaskedSoftmaxCrossEntropyGradOp(), "xent_grad", {z, labels, dloss}).ok());
  ir::ReferenceExecutor cpu(g, false, 3);
  std::vector<int32_t> l(70);
  for (int i = 0; i < 70; ++i) l[i] = i % 4 == 3 ? nn::kPaddingLabel : (i * 13) % 45;
  ASSERT_TRUE(cpu.SetLeaf("labels", l).ok());
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

// The MLP with the masked loss, at any batch.
absl::StatusOr<BucketModel> MaskedMlpAt(int64_t batch) {
  BucketModel m;
  Graph& g = m.graph;
  Value x = *g.AddInput("features", {Shape{batch, kFeatures}, DType::kFloat32});
  Value y = *g.AddInput("labels", {Shape{batch}, DType::kInt32});
  Value h = *nn::Relu(g, *nn::Linear(g, x, 32, "fc0"));
  m.loss = *nn::MaskedSoftmaxCrossEntropy(g, *nn::Linear(g, h, kClasses, "fc1"), y, "loss");
  return m;
}

TEST(BucketedTrainerGpuTest, ABatchPaddedToABucketTrainsAsTheBatchAlone) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bucketed,
                               BucketedTrainer::Create(MaskedMlpAt, {8, 16}, Options()));
  REPRISE_ASSERT_OK_AND_ASSIGN(BucketModel m, MaskedMlpAt(12));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto alone, Trainer::Create(m.graph, m.loss, Options()));
  for (int s = 0; s < 6; ++s) {
    const Batch b = BatchOf(12, s);
    REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t bucket, bucketed->PadToBucket(12));
    ASSERT_EQ(bucket, 16);
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> x, PadRows(b.x, 12, bucket, 7.0f));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> y,
                                 PadRows(b.y, 12, bucket, nn::kPaddingLabel));
    REPRISE_ASSERT_OK(bucketed->SetInput("features", x));
    REPRISE_ASSERT_OK(bucketed->SetInput("labels", y));
    REPRISE_ASSERT_OK(bucketed->Step());
    REPRISE_ASSERT_OK(alone->SetInput("features", b.x));
    REPRISE_ASSERT_OK(alone->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(alone->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float padded_loss, bucketed->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, alone->Loss());
    EXPECT_NEAR(padded_loss, loss, 1e-5 * std::max(1.0f, std::abs(loss))) << "step " << s;
  }
  for (const std::string& name : alone->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> got, bucketed->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> want, alone->GetParameter(name));
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::abs(want[i])))
          << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace reprise
