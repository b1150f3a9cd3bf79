// Data parallelism with one process per GPU, run under mpirun (ctest runs 2 ranks):
//
//   mpirun --allow-run-as-root -np 2 build/reprise_mpi_tests
//
// Every rank runs every test; MPI here only compares the ranks' results (the library's MPI use is
// MpiDataParallel's rendezvous). Without a GPU per rank, every rank must fail the rendezvous with
// the same clear error (no hang, no crash) and the training tests skip; with them, the ranks train
// on their slices of each batch as one GPU on the whole batch, end bitwise equal, and a rank that
// fails during creation leaves no other rank waiting past DataParallel::timeout.
#include <mpi.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

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

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}
// Ranks sharing this rank's host.
int RanksOnThisHost() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int size = 1;
  MPI_Comm_size(local, &size);
  MPI_Comm_free(&local);
  return size;
}
int VisibleGpus() {
  absl::StatusOr<int> count = runtime::VisibleDeviceCount();
  return count.ok() ? *count : 0;
}
// True on every rank when every host has a GPU for each of its ranks (the same answer everywhere,
// so that all ranks run or skip a test alike).
bool EveryRankHasAGpu() {
  int mine = VisibleGpus() >= RanksOnThisHost() ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}
// Every rank's `bytes`, rank by rank.
std::vector<std::string> Gather(const std::string& bytes) {
  int mine = static_cast<int>(bytes.size());
  std::vector<int> sizes(WorldSize()), offsets(WorldSize());
  MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < WorldSize(); ++r) offsets[r] = total, total += sizes[r];
  std::string all(total, '\0');
  MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE,
                 MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < WorldSize(); ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

TrainOptions Options() {
  TrainOptions options;
  options.kernels.whole_step =
      false;  // Data parallelism turns it off; the plain trainer must match.
  options.seed = 42;
  options.optimizer.learning_rate = 0.05f;
  return options;
}

TEST(MpiDataParallelTest, EveryRankGetsItsPlaceOrEveryRankTheSameClearError) {
  const absl::Time start = absl::Now();
  const absl::StatusOr<MpiRank> me = MpiDataParallel();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  if (!EveryRankHasAGpu()) {
    ASSERT_FALSE(me.ok());
    EXPECT_EQ(me.status().code(), absl::StatusCode::kFailedPrecondition) << me.status();
    if (RanksOnThisHost() == WorldSize()) {
      EXPECT_THAT(
          me.status().message(),
          HasSubstr(absl::StrCat("runs ", WorldSize(), " ranks but has ", VisibleGpus(), " GPU")));
    }
    const std::vector<std::string> messages = Gather(std::string(me.status().message()));
    for (const std::string& m : messages) EXPECT_EQ(m, messages[0]) << "ranks fail alike";
    return;
  }
  ASSERT_TRUE(me.ok()) << me.status();
  EXPECT_EQ(me->data_parallel.rank, WorldRank());
  EXPECT_EQ(me->data_parallel.world_size, WorldSize());
  EXPECT_GE(me->device, 0);
  EXPECT_LT(me->device, VisibleGpus());
  const std::vector<std::string> ids =
      Gather(std::string(me->data_parallel.id.bytes.data(), me->data_parallel.id.bytes.size()));
  for (const std::string& id : ids) EXPECT_EQ(id, ids[0]) << "one job id";
  if (RanksOnThisHost() == WorldSize()) {  // One host: every rank its own GPU.
    const std::vector<std::string> devices = Gather(absl::StrCat(me->device));
    for (size_t a = 0; a < devices.size(); ++a) {
      for (size_t b = a + 1; b < devices.size(); ++b) EXPECT_NE(devices[a], devices[b]);
    }
  }
}

// 50 steps of every rank on its slice of each batch against one GPU on the whole batch (each rank
// computes that reference on its own GPU).
TEST(MpiDataParallelTest, RanksOnSlicesTrainAsOneGpuOnTheWholeBatchAndEndBitwiseEqual) {
  if (!EveryRankHasAGpu()) GTEST_SKIP() << "needs a GPU per rank";
  const int ranks = WorldSize();
  constexpr int kGlobal = 64, kSteps = 50;
  if (kGlobal % ranks != 0) GTEST_SKIP() << "needs a rank count dividing " << kGlobal;
  REPRISE_ASSERT_OK_AND_ASSIGN(const MpiRank me, MpiDataParallel());
  const int rank = me.data_parallel.rank;
  const models::Mlp whole = *models::BuildMlp(DpMlp(kGlobal));
  const models::Mlp slice = *models::BuildMlp(DpMlp(kGlobal / ranks));
  TrainOptions single_options = Options();
  single_options.device = me.device;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto single,
                               Trainer::Create(whole.graph, whole.loss, single_options));
  TrainOptions options = Options();
  options.device = me.device;
  options.parallel.data_parallel = me.data_parallel;
  options.parallel.data_parallel->bucket_bytes = 8 << 10;  // Several buckets.
  REPRISE_ASSERT_OK_AND_ASSIGN(auto dp, Trainer::Create(slice.graph, slice.loss, options));
  std::mt19937 rng(11);  // The same batches on every rank.
  for (int step = 0; step < kSteps; ++step) {
    const DpBatch b = MakeDpBatch(rng, kGlobal);
    REPRISE_ASSERT_OK(single->SetInput("features", b.x));
    REPRISE_ASSERT_OK(single->SetInput("labels", b.y));
    REPRISE_ASSERT_OK(single->Step());
    const DpBatch mine = Shard(b, rank, ranks);
    REPRISE_ASSERT_OK(dp->SetInput("features", mine.x));
    REPRISE_ASSERT_OK(dp->SetInput("labels", mine.y));
    REPRISE_ASSERT_OK(dp->Step());
  }
  EXPECT_EQ(dp->stats().graph_replays, kSteps);
  const auto weights = ParameterValues(*dp);
  std::string bytes;
  for (const auto& [name, values] : weights) {
    bytes.append(name);
    bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  const std::vector<std::string> all = Gather(bytes);
  for (int r = 1; r < ranks; ++r) {
    EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " ends with other weights than rank 0";
  }
  for (const auto& [name, values] : ParameterValues(*single)) {
    const std::vector<float>& got = weights.at(name);
    ASSERT_EQ(got.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(got[i], values[i], 2e-4f + 2e-4f * std::abs(values[i]))
          << name << "[" << i << "] on rank " << rank;
    }
  }
}

// The last rank builds a wider model: every rank joins NCCL and the model check fails them all
// within seconds, each naming the mismatch.
TEST(MpiDataParallelTest, AMismatchedModelOnOneRankFailsEveryRankWithinSeconds) {
  if (!EveryRankHasAGpu() || WorldSize() < 2) GTEST_SKIP() << "needs a GPU per rank, 2 ranks";
  REPRISE_ASSERT_OK_AND_ASSIGN(const MpiRank me, MpiDataParallel());
  const bool last = me.data_parallel.rank == WorldSize() - 1;
  const models::Mlp mlp = *models::BuildMlp(DpMlp(8, last ? 96 : 64));
  TrainOptions options = Options();
  options.device = me.device;
  options.parallel.data_parallel = me.data_parallel;
  options.parallel.data_parallel->timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  const absl::Status s = Trainer::Create(mlp.graph, mlp.loss, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("different model"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << s;
}

// The last rank asks for a GPU that does not exist and fails before it joins NCCL; the others,
// in other processes, have no DataParallelAbort to tell them, and give up at
// DataParallel::timeout, their NCCL setup aborted. (A program would end its process on such an
// error, and mpirun would then end the job at once.)
TEST(MpiDataParallelTest, ARankMissingItsGpuLeavesNoOtherRankWaitingPastTheTimeout) {
  if (!EveryRankHasAGpu() || WorldSize() < 2) GTEST_SKIP() << "needs a GPU per rank, 2 ranks";
  REPRISE_ASSERT_OK_AND_ASSIGN(const MpiRank me, MpiDataParallel());
  const bool last = me.data_parallel.rank == WorldSize() - 1;
  const models::Mlp mlp = *models::BuildMlp(DpMlp(8));
  TrainOptions options = Options();
  options.device = last ? 1000 : me.device;
  options.parallel.data_parallel = me.data_parallel;
  options.parallel.data_parallel->timeout = absl::Seconds(5);
  const absl::Time start = absl::Now();
  const absl::Status s = Trainer::Create(mlp.graph, mlp.loss, options).status();
  const absl::Duration took = absl::Now() - start;
  if (last) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("device 1000"));
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(s.message(), HasSubstr("DataParallel::timeout"));
    EXPECT_GE(took, absl::Seconds(5));
  }
  EXPECT_LT(took, absl::Seconds(40)) << s;
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace reprise

// Every rank runs the tests; the job fails when any rank's tests fail.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
