// Data-parallel training on GPUs: one rank (an all-reduce over itself) trains bit for bit as a
// plain trainer; two ranks on two halves of the batch train as one GPU on the whole batch (within
// float32 reassociation), end with bitwise identical weights on every rank, and their captured
// replay equals the bulked run of the same plan bit for bit. Clear errors for too many ranks and
// for ranks with different models; a rank that fails during creation leaves no other rank waiting
// (at once with a shared DataParallelAbort, else at DataParallel::timeout). Skips without the GPUs
// it needs.
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "tests/gpu/data_parallel_batches.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/parameter_values.h"

namespace reprise {
namespace {

using testing::DpBatch;
using testing::DpMlp;
using ::testing::HasSubstr;
using testing::MakeDpBatch;
using testing::ParameterValues;
using testing::Shard;

TrainOptions Options(ExecMode mode) {
  TrainOptions options;
  options.launch.mode = mode;
  options.kernels.whole_step =
      false;  // Data parallelism turns it off; the plain trainer must match.
  options.seed = 42;
  options.optimizer.learning_rate = 0.05f;
  return options;
}

int VisibleGpus() {
  absl::StatusOr<int> count = runtime::VisibleDeviceCount();
  return count.ok() ? *count : 0;
}

// float32, and bfloat16 mixed precision, whose 16-bit gradients are averaged and then widened by
// casts on the communication lane.
class DataParallelOneRankTest : public ::testing::TestWithParam<DType> {};

TEST_P(DataParallelOneRankTest, TrainsBitwiseAsAPlainTrainer) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = *models::BuildMlp(DpMlp(32));
  TrainOptions plain_options = Options(ExecMode::kGraph);
  plain_options.numerics.compute_dtype = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain, Trainer::Create(mlp.graph, mlp.loss, plain_options));
  TrainOptions options = plain_options;
  REPRISE_ASSERT_OK_AND_ASSIGN(const DataParallelId id, NewDataParallelId());
  options.parallel.data_parallel = DataParallel{.rank = 0, .world_size = 1, .id = id};
  REPRISE_ASSERT_OK_AND_ASSIGN(auto one, Trainer::Create(mlp.graph, mlp.loss, options));
  std::mt19937 rng(3);
  for (int step = 0; step < 20; ++step) {
    const DpBatch b = MakeDpBatch(rng, 32);
    for (Trainer* t : {plain.get(), one.get()}) {
      REPRISE_ASSERT_OK(t->SetInput("features", b.x));
      REPRISE_ASSERT_OK(t->SetInput("labels", b.y));
      REPRISE_ASSERT_OK(t->Step());
    }
    ASSERT_EQ(*plain->Loss(), *one->Loss()) << "step " << step;
  }
  EXPECT_EQ(ParameterValues(*plain), ParameterValues(*one));
  EXPECT_EQ(one->stats().graph_replays, 20);
}

INSTANTIATE_TEST_SUITE_P(Precisions, DataParallelOneRankTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// 50 steps of two ranks on the halves of each batch against one GPU on the whole batch.
TEST(DataParallelGpuTest, TwoRanksOnHalfBatchesTrainAsOneGpuOnTheWholeBatch) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  constexpr int kGlobal = 64, kSteps = 50;
  const models::Mlp whole = *models::BuildMlp(DpMlp(kGlobal));
  const models::Mlp half = *models::BuildMlp(DpMlp(kGlobal / 2));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto single,
                               Trainer::Create(whole.graph, whole.loss, Options(ExecMode::kGraph)));
  TrainOptions options = Options(ExecMode::kGraph);
  options.parallel.data_parallel = DataParallel{.bucket_bytes = 8 << 10};  // Several buckets.
  REPRISE_ASSERT_OK_AND_ASSIGN(auto dp,
                               LocalDataParallel::Create(half.graph, half.loss, options, 2));
  std::mt19937 rng(11);
  for (int step = 0; step < kSteps; ++step) {
    const DpBatch b = MakeDpBatch(rng, kGlobal);
    REPRISE_ASSERT_OK(single->SetInput("features", b.x));
    REPRISE_ASSERT_OK(single->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(single->Step());
    REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
      const DpBatch mine = Shard(b, rank, 2);
      RETURN_IF_ERROR(t.SetInput("features", mine.x));
      return t.SetInput("labels", mine.y);
    }));
    REPRISE_ASSERT_OK(dp->Step());
  }
  std::vector<testing::ParameterMap> ranks(2);
  REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) {
    ranks[rank] = ParameterValues(t);
    return absl::OkStatus();
  }));
  EXPECT_EQ(ranks[0], ranks[1]) << "ranks must end with bitwise identical weights";
  const auto reference = ParameterValues(*single);
  for (const auto& [name, values] : reference) {
    const std::vector<float>& got = ranks[0].at(name);
    ASSERT_EQ(got.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(got[i], values[i], 2e-4f + 2e-4f * std::abs(values[i]))
          << name << "[" << i << "]";
    }
  }
}

TEST(DataParallelGpuTest, TwoRanksReplayBitwiseAsTheirBulkedRunAndVerifyAgrees) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  const models::Mlp half = *models::BuildMlp(DpMlp(32));
  std::vector<std::vector<testing::ParameterMap>> by_mode;
  for (ExecMode mode : {ExecMode::kGraph, ExecMode::kBulked}) {
    TrainOptions options = Options(mode);
    options.parallel.data_parallel = DataParallel{.bucket_bytes = 8 << 10};
    REPRISE_ASSERT_OK_AND_ASSIGN(auto dp,
                                 LocalDataParallel::Create(half.graph, half.loss, options, 2));
    std::mt19937 rng(17);
    for (int step = 0; step < 10; ++step) {
      const DpBatch b = MakeDpBatch(rng, 64);
      REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
        const DpBatch mine = Shard(b, rank, 2);
        RETURN_IF_ERROR(t.SetInput("features", mine.x));
        RETURN_IF_ERROR(t.SetInput("labels", mine.y));
        return t.Step();
      }));
    }
    std::vector<testing::ParameterMap> weights(2);
    REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) {
      weights[rank] = ParameterValues(t);
      return absl::OkStatus();
    }));
    if (mode == ExecMode::kGraph) {
      std::vector<VerifyResult> verified(2);
      REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
        ASSIGN_OR_RETURN(verified[rank], t.Verify(5));
        return absl::OkStatus();
      }));
      for (const VerifyResult& v : verified) EXPECT_TRUE(v.ok()) << v.ToString();
    }
    by_mode.push_back(std::move(weights));
  }
  EXPECT_EQ(by_mode[0][0], by_mode[0][1]);
  EXPECT_EQ(by_mode[0], by_mode[1]) << "graph replay and bulked runs differ";
}

TEST(DataParallelGpuTest, MoreRanksThanGpusIsAClearError) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = *models::BuildMlp(DpMlp(8));
  auto dp =
      LocalDataParallel::Create(mlp.graph, mlp.loss, Options(ExecMode::kGraph), VisibleGpus() + 1);
  EXPECT_EQ(dp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(dp.status().message(), HasSubstr("GPU"));
}

TEST(DataParallelGpuTest, RanksWithDifferentModelsAreRefusedOnEveryRank) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  REPRISE_ASSERT_OK_AND_ASSIGN(const DataParallelId id, NewDataParallelId());
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      const models::Mlp mlp = *models::BuildMlp(DpMlp(8, rank == 0 ? 64 : 96));
      TrainOptions options = Options(ExecMode::kGraph);
      options.device = rank;
      options.parallel.data_parallel = DataParallel{.rank = rank, .world_size = 2, .id = id};
      results[rank] = Trainer::Create(mlp.graph, mlp.loss, options).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("different model"));
  }
}

// Creates rank r's Trainer on its own thread, as two processes or LocalDataParallel would, with
// `configure` adjusting rank r's options; returns each rank's Status and how long its Create took.
struct RankOutcome {
  absl::Status status;
  absl::Duration took;
};
std::vector<RankOutcome> CreateRanks(
    int ranks, const std::function<void(int rank, int64_t& width, TrainOptions&)>& configure) {
  const DataParallelId id = *NewDataParallelId();
  std::vector<RankOutcome> out(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      int64_t width = 64;
      TrainOptions options = Options(ExecMode::kGraph);
      options.device = rank;
      options.parallel.data_parallel = DataParallel{.rank = rank, .world_size = ranks, .id = id};
      configure(rank, width, options);
      const models::Mlp mlp = *models::BuildMlp(DpMlp(8, width));
      const absl::Time start = absl::Now();
      out[rank].status = Trainer::Create(mlp.graph, mlp.loss, options).status();
      out[rank].took = absl::Now() - start;
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// Rank 1 asks for a GPU that does not exist, so it fails before it joins NCCL; rank 0, sharing
// the job's DataParallelAbort (as LocalDataParallel's ranks do), stops waiting in NCCL's setup at
// once instead of after DataParallel::timeout (10 minutes by default).
TEST(DataParallelFailureGpuTest, ARankMissingItsGpuStopsTheOtherRankAtOnce) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  auto abort = std::make_shared<DataParallelAbort>();
  const std::vector<RankOutcome> ranks =
      CreateRanks(2, [&](int rank, int64_t&, TrainOptions& options) {
        options.parallel.data_parallel->abort = abort;
        if (rank == 1) options.device = 1000;
      });
  EXPECT_EQ(ranks[1].status.code(), absl::StatusCode::kInvalidArgument) << ranks[1].status;
  EXPECT_THAT(ranks[1].status.message(), HasSubstr("data-parallel rank 1 of 2"));
  EXPECT_THAT(ranks[1].status.message(), HasSubstr("device 1000"));
  EXPECT_EQ(ranks[0].status.code(), absl::StatusCode::kAborted) << ranks[0].status;
  EXPECT_THAT(ranks[0].status.message(), HasSubstr("data-parallel rank 0 of 2"));
  EXPECT_THAT(ranks[0].status.message(), HasSubstr("rank 1 failed"));
  EXPECT_THAT(ranks[0].status.message(), HasSubstr("device 1000"));
  for (const RankOutcome& r : ranks) EXPECT_LT(r.took, absl::Seconds(30)) << r.status;
  ASSERT_TRUE(abort->failure().has_value());
  EXPECT_EQ(abort->failure()->rank, 1);
}

// The same without a shared DataParallelAbort (as with one process per rank, where the failed
// process would also end the job through mpirun): rank 0 gives up after DataParallel::timeout,
// its NCCL setup aborted, and says why.
TEST(DataParallelFailureGpuTest, WithoutASharedAbortTheOtherRankGivesUpAtTheTimeout) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  const std::vector<RankOutcome> ranks =
      CreateRanks(2, [&](int rank, int64_t&, TrainOptions& options) {
        options.parallel.data_parallel->timeout = absl::Seconds(3);
        if (rank == 1) options.device = 1000;
      });
  EXPECT_EQ(ranks[1].status.code(), absl::StatusCode::kInvalidArgument) << ranks[1].status;
  EXPECT_EQ(ranks[0].status.code(), absl::StatusCode::kDeadlineExceeded) << ranks[0].status;
  EXPECT_THAT(ranks[0].status.message(), HasSubstr("DataParallel::timeout"));
  EXPECT_GE(ranks[0].took, absl::Seconds(3));
  EXPECT_LT(ranks[0].took, absl::Seconds(30));
}

// Rank 1 builds a wider model: both ranks join NCCL, the model check fails them, each within
// seconds, each naming the mismatch (its own FailedPrecondition, or Aborted quoting the rank that
// failed first).
TEST(DataParallelFailureGpuTest, AMismatchedModelOnOneRankFailsEveryRankWithinSeconds) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  auto abort = std::make_shared<DataParallelAbort>();
  const std::vector<RankOutcome> ranks =
      CreateRanks(2, [&](int rank, int64_t& width, TrainOptions& options) {
        options.parallel.data_parallel->abort = abort;
        if (rank == 1) width = 96;
      });
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status& s = ranks[rank].status;
    EXPECT_THAT(s.code(),
                ::testing::AnyOf(absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted))
        << s;
    EXPECT_THAT(s.message(), HasSubstr("different model")) << "rank " << rank;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("data-parallel rank ", rank, " of 2")));
    EXPECT_LT(ranks[rank].took, absl::Seconds(30)) << s;
  }
}

// Nothing of a failed job lingers: the next job on the same GPUs trains.
TEST(DataParallelFailureGpuTest, AJobAfterAFailedOneTrains) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << VisibleGpus() << " visible";
  auto abort = std::make_shared<DataParallelAbort>();
  const std::vector<RankOutcome> failed =
      CreateRanks(2, [&](int rank, int64_t&, TrainOptions& options) {
        options.parallel.data_parallel->abort = abort;
        if (rank == 1) options.device = 1000;
      });
  ASSERT_FALSE(failed[0].status.ok());
  const models::Mlp half = *models::BuildMlp(DpMlp(32));
  TrainOptions options = Options(ExecMode::kGraph);
  options.parallel.data_parallel = DataParallel{};
  REPRISE_ASSERT_OK_AND_ASSIGN(auto dp,
                               LocalDataParallel::Create(half.graph, half.loss, options, 2));
  std::mt19937 rng(5);
  const DpBatch b = MakeDpBatch(rng, 64);
  REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
    const DpBatch mine = Shard(b, rank, 2);
    RETURN_IF_ERROR(t.SetInput("features", mine.x));
    RETURN_IF_ERROR(t.SetInput("labels", mine.y));
    return t.Step();
  }));
}

}  // namespace
}  // namespace reprise
