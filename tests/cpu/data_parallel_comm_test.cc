// The all_reduce op and what sits on the Communicator, checked over the in-process fake: the
// lowering of a plan's all-reduces averages each bucket across ranks in place of NCCL, mismatched
// collectives fail on every rank, and ranks with different models are refused on every rank.
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/all_reduce.h"
#include "src/ops/gpu_kernel.h"
#include "src/parallel/fake_communicator.h"
#include "src/parallel/model_check.h"
#include "src/passes/gradient_buckets.h"
#include "src/passes/plan.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank) on one thread per rank and returns each rank's Status.
std::vector<absl::Status> OnEveryRank(int world, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(AllReduceOpTest, OneTypePerBucketAndTheReferenceIsOneReplicasAverage) {
  Graph g;
  Value a = *g.AddInput("a", {Shape{3}, DType::kFloat32});
  Value b = *g.AddInput("b", {Shape{2, 2}, DType::kFloat32});
  Value h = *g.AddInput("h", {Shape{2}, DType::kBFloat16});
  EXPECT_THAT(g.AddOp(ops::AllReduceOp(), "mixed", {a, h}).status().message(),
              HasSubstr("one collective reduces one type"));
  auto outs = g.AddOp(ops::AllReduceOp(), "bucket", {a, b});
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_EQ(g.spec((*outs)[1]), g.spec(b));
  ir::ReferenceExecutor run(g, /*float64=*/false, 1);
  ASSERT_TRUE(run.SetLeaf("a", std::vector<double>{1, 2, 3}).ok());
  ASSERT_TRUE(run.SetLeaf("b", std::vector<double>{4, 5, 6, 7}).ok());
  ASSERT_TRUE(run.Run().ok());
  EXPECT_EQ((*run.Tensor((*outs)[1]))->data<float>()[3], 7.0f);
}

TEST(AllReduceOpTest, LoweringWithoutACommunicatorNamesTheNode) {
  Graph g;
  Value a = *g.AddInput("a", {Shape{3}, DType::kFloat32});
  auto outs = g.AddOp(ops::AllReduceOp(), "grad_allreduce.0", {a});
  ASSERT_TRUE(outs.ok());
  float in[3], out[3];
  ops::LoweringContext ctx;
  ctx.input_specs = {g.spec(a)};
  ctx.inputs = {in};
  ctx.outputs = {out};
  auto kernel = ops::AllReduceOp().lower(ctx, g.node(outs->front().node));
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(kernel.status().message(), HasSubstr("grad_allreduce.0"));
}

// Random values of rank `rank`'s gradient `k` of bucket `bucket`, the same whoever asks.
std::vector<float> GradientValues(int rank, int bucket, int k, int64_t n) {
  std::mt19937 rng(1000 * rank + 31 * bucket + k);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

// Every rank lowers the plan's all-reduces over its own host "arena" and runs them in schedule
// order, each after writing random gradients into its inputs (as the launches before it would):
// each average is the ranks' mean, and no byte outside its output block changes.
TEST(FakeCommunicatorTest, APlansAllReducesAverageEveryBucketAcrossRanks) {
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 16, .depth = 3, .width = 24});
  ASSERT_TRUE(mlp.ok());
  const autodiff::TrainingGraph t = *autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {});
  auto buckets = passes::AssignGradientBuckets(t, 2000);
  ASSERT_TRUE(buckets.ok());
  ASSERT_GT(buckets->size(), 1u);
  passes::PlanOptions options{.lanes = 2};
  options.fusion.whole_mlp_step = false;
  auto plan = passes::BuildPlan(*passes::AverageGradients(t, *buckets), {}, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph& g = plan->graph();
  constexpr int kWorld = 3;
  auto comms = parallel::MakeFakeCommunicators(kWorld);
  const std::vector<absl::Status> done = OnEveryRank(kWorld, [&](int rank) -> absl::Status {
    std::vector<float> arena(plan->memory.arena_bytes / sizeof(float), -7.0f);
    char* base = reinterpret_cast<char*>(arena.data());
    auto at = [&](Value v) { return plan->memory.Find(v)->offset / sizeof(float); };
    int bucket = 0;
    for (const passes::ScheduledLaunch& l : plan->launches) {
      const Node& node = g.node(l.node);
      if (node.op != &ops::AllReduceOp()) continue;
      ops::LoweringContext ctx;
      ctx.communicator = comms[rank].get();
      for (int k = 0; k < static_cast<int>(node.inputs.size()); ++k) {
        const Value v = node.inputs[k];
        const std::vector<float> mine = GradientValues(rank, bucket, k, g.spec(v).NumElements());
        std::copy(mine.begin(), mine.end(), arena.begin() + at(v));
        ctx.input_specs.push_back(g.spec(v));
        ctx.inputs.push_back(base + plan->memory.Find(v)->offset);
      }
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        ctx.outputs.push_back(base + plan->memory.Find({node.id, o})->offset);
      }
      ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> kernel, node.op->lower(ctx, node));
      const std::vector<float> before = arena;
      RETURN_IF_ERROR(kernel->Launch(nullptr));
      std::vector<bool> output(arena.size(), false);
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        const int64_t n = node.outputs[o].NumElements();
        std::vector<float> mean(n, 0.0f);
        for (int r = 0; r < kWorld; ++r) {
          const std::vector<float> theirs = GradientValues(r, bucket, o, n);
          for (int64_t i = 0; i < n; ++i) mean[i] += theirs[i] * (1.0f / kWorld);
        }
        for (int64_t i = 0; i < n; ++i) {
          if (arena[at({node.id, o}) + i] != mean[i]) {
            return absl::InternalError(absl::StrCat(node.name, " output ", o, " element ", i, ": ",
                                                    arena[at({node.id, o}) + i], " != ", mean[i]));
          }
        }
      }
      // The block from the first output to the end of the last, padding included, is written.
      const passes::Buffer* last =
          plan->memory.Find({node.id, static_cast<int>(node.outputs.size()) - 1});
      const size_t first = at({node.id, 0}), end = (last->offset + last->bytes) / sizeof(float);
      for (size_t i = 0; i < arena.size(); ++i) {
        if ((i < first || i >= end) && std::memcmp(&arena[i], &before[i], sizeof(float)) != 0) {
          return absl::InternalError(
              absl::StrCat(node.name, " wrote float ", i, " outside its outputs"));
        }
      }
      ++bucket;
    }
    if (bucket != static_cast<int>(buckets->size())) {
      return absl::InternalError(
          absl::StrCat(bucket, " all-reduces for ", buckets->size(), " buckets"));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : done) EXPECT_TRUE(s.ok()) << s;
}

TEST(FakeCommunicatorTest, Bfloat16AverageRoundsOnce) {
  auto comms = parallel::MakeFakeCommunicators(2);
  const float values[2] = {1.0f, 1.0078125f};  // Average 1.00390625: a tie, rounds to even (1).
  uint16_t out[2];
  const std::vector<absl::Status> done = OnEveryRank(2, [&](int rank) {
    uint16_t in = ir::FloatToBFloat16(values[rank]);
    return comms[rank]->AllReduceAverage(&in, &out[rank], 1, DType::kBFloat16, nullptr, "test");
  });
  for (const absl::Status& s : done) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ir::BFloat16ToFloat(out[0]), 1.0f);
  EXPECT_EQ(out[0], out[1]);
}

TEST(FakeCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  auto comms = parallel::MakeFakeCommunicators(2);
  float data[5] = {};
  const std::vector<absl::Status> done = OnEveryRank(2, [&](int rank) {
    return comms[rank]->AllReduceAverage(data, data, rank == 0 ? 4 : 5, DType::kFloat32, nullptr,
                                         "node 'grad_allreduce.0'");
  });
  for (const absl::Status& s : done) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("grad_allreduce.0"));
  }
}

TEST(ModelCheckTest, RanksWithAnotherModelAreRefusedOnEveryRank) {
  EXPECT_TRUE(parallel::CompareRankDigests({"a", "a", "a"}).ok());
  const absl::Status differ = parallel::CompareRankDigests({"a", "a", "b", "c"});
  EXPECT_EQ(differ.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(differ.message(), HasSubstr("ranks 2, 3 build a different model"));

  auto comms = parallel::MakeFakeCommunicators(3);
  const std::string same(parallel::kDigestBytes, 'a');
  std::string other = same;
  other.back() = 'b';
  const std::vector<absl::Status> done = OnEveryRank(3, [&](int rank) {
    return parallel::CheckSameStepOnEveryRank(*comms[rank], rank == 1 ? other : same, nullptr);
  });
  for (const absl::Status& s : done) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("rank 1 builds a different model"));
  }
  const std::vector<absl::Status> agree = OnEveryRank(
      3, [&](int rank) { return parallel::CheckSameStepOnEveryRank(*comms[rank], same, nullptr); });
  for (const absl::Status& s : agree) EXPECT_TRUE(s.ok()) << s;
}

// A rank that never comes to a collective leaves the others waiting only until the timeout; the
// job is then broken, and the late rank's collective fails at once instead of waiting for ranks
// that left.
TEST(FakeCommunicatorTest, ARankThatNeverComesFailsTheOthersAtTheTimeout) {
  auto comms = parallel::MakeFakeCommunicators(2, absl::Milliseconds(200));
  const int32_t mine = 7;
  int32_t all[2];
  const absl::Time start = absl::Now();
  const absl::Status waited = comms[0]->AllGather(&mine, all, sizeof(mine), nullptr, "the check");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("the check"));
  const absl::Status late = comms[1]->AllGather(&mine, all, sizeof(mine), nullptr, "the check");
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_THAT(late.message(), HasSubstr("rank 0 gave up"));
}

// With a shared DataParallelAbort, the failure of a rank that will never come ends the others'
// wait at once, naming that rank and its error, however long the timeout.
TEST(FakeCommunicatorTest, ARankFailingEndsTheOthersWaitAtOnce) {
  auto abort = std::make_shared<DataParallelAbort>();
  auto comms = parallel::MakeFakeCommunicators(3, absl::InfiniteDuration(), abort);
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> results = OnEveryRank(3, [&](int rank) -> absl::Status {
    if (rank == 2) {
      absl::SleepFor(absl::Milliseconds(30));
      abort->Fail(2, absl::FailedPreconditionError("no CUDA device visible"));
      return absl::OkStatus();
    }
    std::vector<float> grads = {1.0f, 2.0f};
    return comms[rank]->AllReduceAverage(grads.data(), grads.data(), 2, DType::kFloat32, nullptr,
                                         "node 'grad_allreduce.0'");
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kAborted) << results[rank];
    EXPECT_THAT(results[rank].message(), HasSubstr("node 'grad_allreduce.0'"));
    EXPECT_THAT(results[rank].message(), HasSubstr("rank 2 failed"));
    EXPECT_THAT(results[rank].message(), HasSubstr("no CUDA device visible"));
  }
}

// The model check at creation is one such wait: a rank that failed before it does not leave the
// others in it.
TEST(ModelCheckTest, ARankThatFailedBeforeTheCheckStopsTheOthers) {
  auto abort = std::make_shared<DataParallelAbort>();
  auto comms = parallel::MakeFakeCommunicators(2, absl::InfiniteDuration(), abort);
  const std::string digest(parallel::kDigestBytes, 'a');
  const std::vector<absl::Status> results = OnEveryRank(2, [&](int rank) -> absl::Status {
    if (rank == 1) {
      abort->Fail(1, absl::ResourceExhaustedError("out of memory: the arena"));
      return absl::OkStatus();
    }
    return parallel::CheckSameStepOnEveryRank(*comms[0], digest, nullptr);
  });
  EXPECT_EQ(results[0].code(), absl::StatusCode::kAborted) << results[0];
  EXPECT_THAT(results[0].message(), HasSubstr("checking that every rank runs the same step"));
  EXPECT_THAT(results[0].message(), HasSubstr("out of memory: the arena"));
}

}  // namespace
}  // namespace reprise
