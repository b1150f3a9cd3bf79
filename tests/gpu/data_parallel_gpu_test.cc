// Data-parallel training on GPUs: one rank (an all-reduce over itself) trains bit for bit as a
// plain trainer; two ranks on two halves of the batch train as one GPU on the whole batch (within
// float32 reassociation), end with bitwise identical weights on every rank, and their captured
// replay equals the bulked run of the same plan bit for bit. Clear errors for too many ranks and
// for ranks with different models. Skips without the GPUs it needs.
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int kFeatures = 16, kClasses = 5;

models::MlpConfig Mlp(int64_t batch, int64_t width = 64) {
  return {
      .batch = batch, .input_features = kFeatures, .depth = 3, .width = width, .classes = kClasses};
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

Batch MakeBatch(std::mt19937& rng, int batch) {
  std::normal_distribution<float> normal;
  Batch b{std::vector<float>(batch * kFeatures), std::vector<int32_t>(batch)};
  for (float& v : b.x) v = normal(rng);
  for (int i = 0; i < batch; ++i) {
    float best = -1e9f;
    for (int c = 0; c < kClasses; ++c) {
      float score = 0;
      for (int j = 0; j < kFeatures; ++j)
        score += b.x[i * kFeatures + j] * ((j * 7 + c * 3) % 5 - 2);
      if (score > best) best = score, b.y[i] = c;
    }
  }
  return b;
}

// Rank `rank`'s slice of `whole` when `ranks` ranks split it.
Batch Shard(const Batch& whole, int rank, int ranks) {
  const size_t rows = whole.y.size() / ranks;
  Batch b;
  b.x.assign(whole.x.begin() + rank * rows * kFeatures,
             whole.x.begin() + (rank + 1) * rows * kFeatures);
  b.y.assign(whole.y.begin() + rank * rows, whole.y.begin() + (rank + 1) * rows);
  return b;
}

TrainOptions Options(ExecMode mode) {
  TrainOptions options;
  options.mode = mode;
  options.whole_step = false;  // Data parallelism turns it off; the plain trainer must match.
  options.seed = 42;
  options.sgd.learning_rate = 0.05f;
  return options;
}

int VisibleGpus() {
  absl::StatusOr<int> count = runtime::VisibleDeviceCount();
  return count.ok() ? *count : 0;
}

std::map<std::string, std::vector<float>> Weights(Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (const std::string& name : t.ParameterNames()) out[name] = *t.GetParameter(name);
  return out;
}

// float32, and bfloat16 mixed precision, whose 16-bit gradients are averaged and then widened by
// casts on the communication lane.
class DataParallelOneRankTest : public ::testing::TestWithParam<DType> {};

TEST_P(DataParallelOneRankTest, TrainsBitwiseAsAPlainTrainer) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = *models::BuildMlp(Mlp(32));
  TrainOptions plain_options = Options(ExecMode::kGraph);
  plain_options.compute_dtype = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain, Trainer::Create(mlp.graph, mlp.loss, plain_options));
  TrainOptions options = plain_options;
  REPRISE_ASSERT_OK_AND_ASSIGN(const DataParallelId id, NewDataParallelId());
  options.data_parallel = DataParallel{.rank = 0, .world_size = 1, .id = id};
  REPRISE_ASSERT_OK_AND_ASSIGN(auto one, Trainer::Create(mlp.graph, mlp.loss, options));
  std::mt19937 rng(3);
  for (int step = 0; step < 20; ++step) {
    const Batch b = MakeBatch(rng, 32);
    for (Trainer* t : {plain.get(), one.get()}) {
      REPRISE_ASSERT_OK(t->SetInput("features", b.x));
      REPRISE_ASSERT_OK(t->SetInput("labels", b.y));
      REPRISE_ASSERT_OK(t->Step());
    }
    ASSERT_EQ(*plain->Loss(), *one->Loss()) << "step " << step;
  }
  EXPECT_EQ(Weights(*plain), Weights(*one));
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
  const models::Mlp whole = *models::BuildMlp(Mlp(kGlobal));
  const models::Mlp half = *models::BuildMlp(Mlp(kGlobal / 2));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto single,
                               Trainer::Create(whole.graph, whole.loss, Options(ExecMode::kGraph)));
  TrainOptions options = Options(ExecMode::kGraph);
  options.data_parallel = DataParallel{.bucket_bytes = 8 << 10};  // Several buckets.
  REPRISE_ASSERT_OK_AND_ASSIGN(auto dp,
                               LocalDataParallel::Create(half.graph, half.loss, options, 2));
  std::mt19937 rng(11);
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = MakeBatch(rng, kGlobal);
    REPRISE_ASSERT_OK(single->SetInput("features", b.x));
    REPRISE_ASSERT_OK(single->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(single->Step());
    REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
      const Batch mine = Shard(b, rank, 2);
      RETURN_IF_ERROR(t.SetInput("features", mine.x));
      return t.SetInput("labels", mine.y);
    }));
    REPRISE_ASSERT_OK(dp->Step());
  }
  std::vector<std::map<std::string, std::vector<float>>> ranks(2);
  REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) {
    ranks[rank] = Weights(t);
    return absl::OkStatus();
  }));
  EXPECT_EQ(ranks[0], ranks[1]) << "ranks must end with bitwise identical weights";
  const auto reference = Weights(*single);
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
  const models::Mlp half = *models::BuildMlp(Mlp(32));
  std::vector<std::vector<std::map<std::string, std::vector<float>>>> by_mode;
  for (ExecMode mode : {ExecMode::kGraph, ExecMode::kBulked}) {
    TrainOptions options = Options(mode);
    options.data_parallel = DataParallel{.bucket_bytes = 8 << 10};
    REPRISE_ASSERT_OK_AND_ASSIGN(auto dp,
                                 LocalDataParallel::Create(half.graph, half.loss, options, 2));
    std::mt19937 rng(17);
    for (int step = 0; step < 10; ++step) {
      const Batch b = MakeBatch(rng, 64);
      REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) -> absl::Status {
        const Batch mine = Shard(b, rank, 2);
        RETURN_IF_ERROR(t.SetInput("features", mine.x));
        RETURN_IF_ERROR(t.SetInput("labels", mine.y));
        return t.Step();
      }));
    }
    std::vector<std::map<std::string, std::vector<float>>> weights(2);
    REPRISE_ASSERT_OK(dp->ForEachRank([&](int rank, Trainer& t) {
      weights[rank] = Weights(t);
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
  const models::Mlp mlp = *models::BuildMlp(Mlp(8));
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
      const models::Mlp mlp = *models::BuildMlp(Mlp(8, rank == 0 ? 64 : 96));
      TrainOptions options = Options(ExecMode::kGraph);
      options.device = rank;
      options.data_parallel = DataParallel{.rank = rank, .world_size = 2, .id = id};
      results[rank] = Trainer::Create(mlp.graph, mlp.loss, options).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("different model"));
  }
}

}  // namespace
}  // namespace reprise
