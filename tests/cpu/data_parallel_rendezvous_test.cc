// The rendezvous of a launcher-started job (what MpiDataParallel runs over MPI), over a fake
// transport: every rank gets rank 0's id and its own GPU; an overcommitted host or a failed id
// fails every rank alike.
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/parallel/fake_communicator.h"
#include "src/parallel/rendezvous.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// A transport over the fake communicator's host-memory collectives.
class FakeTransport : public parallel::RendezvousTransport {
 public:
  explicit FakeTransport(parallel::Communicator* comm) : comm_(comm) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  absl::Status BroadcastFromRoot(void* data, int64_t bytes) override {
    return comm_->Broadcast(data, bytes, 0, nullptr, "rendezvous");
  }
  absl::Status AllGather(const void* data, int64_t bytes, void* out) override {
    return comm_->AllGather(data, out, bytes, nullptr, "rendezvous");
  }

 private:
  parallel::Communicator* comm_;
};

DataParallelId IdOf(char fill) {
  DataParallelId id;
  id.bytes.fill(fill);
  return id;
}

// Runs the rendezvous on one thread per rank, rank r on hosts[r] seeing devices[r] GPUs.
std::vector<absl::StatusOr<MpiRank>> Meet(
    const std::vector<std::string>& hosts, const std::vector<int>& devices,
    std::function<absl::StatusOr<DataParallelId>()> new_id = [] { return IdOf('z'); }) {
  const int world = static_cast<int>(hosts.size());
  auto comms = parallel::MakeFakeCommunicators(world);
  std::vector<absl::StatusOr<MpiRank>> results(world, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      FakeTransport transport(comms[r].get());
      // Only rank 0 may make the id: the others' maker fails the test if called.
      auto maker = r == 0 ? new_id : [] { return absl::StatusOr<DataParallelId>(IdOf('x')); };
      results[r] = parallel::Rendezvous(transport, {.host_name = hosts[r],
                                                    .visible_devices = devices[r],
                                                    .bucket_bytes = 1234,
                                                    .new_id = maker});
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(RendezvousTest, EveryRankGetsRankZerosIdAndItsIndexOnItsHostAsItsGpu) {
  const auto ranks = Meet({"a", "b", "a", "b"}, {2, 2, 2, 2});
  const std::vector<int> expected_device = {0, 0, 1, 1};
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(ranks[r].ok()) << ranks[r].status();
    EXPECT_EQ(ranks[r]->data_parallel.rank, r);
    EXPECT_EQ(ranks[r]->data_parallel.world_size, 4);
    EXPECT_EQ(ranks[r]->data_parallel.bucket_bytes, 1234);
    EXPECT_EQ(ranks[r]->data_parallel.id.bytes, IdOf('z').bytes);
    EXPECT_EQ(ranks[r]->device, expected_device[r]);
  }
}

TEST(RendezvousTest, AHostWithMoreRanksThanGpusFailsEveryRank) {
  const auto ranks = Meet({"a", "a", "a", "b"}, {2, 2, 2, 4});
  for (const auto& r : ranks) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(r.status().message(), HasSubstr("host 'a' runs 3 ranks but has 2 GPUs"));
  }
}

TEST(RendezvousTest, RankZerosFailureToMakeTheIdReachesEveryRank) {
  const auto ranks = Meet({"a", "a"}, {2, 2}, [] {
    return absl::StatusOr<DataParallelId>(absl::InternalError("ncclGetUniqueId failed: boom"));
  });
  for (const auto& r : ranks) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(r.status().message(), HasSubstr("boom"));
  }
}

// A rank that cannot take part (here: CUDA could not count its GPUs) still meets the others, so
// that every rank fails with its error instead of waiting for it.
TEST(RendezvousTest, ARankThatCannotTakePartFailsEveryRankWithItsError) {
  auto comms = parallel::MakeFakeCommunicators(3, absl::Seconds(30));
  std::vector<absl::StatusOr<MpiRank>> results(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      FakeTransport transport(comms[r].get());
      parallel::RendezvousOptions options{
          .host_name = "gpuhost", .visible_devices = 4, .new_id = [] { return IdOf('z'); }};
      if (r == 2) options.local_error = absl::InternalError("cudaGetDeviceCount: driver too old");
      results[r] = parallel::Rendezvous(transport, options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_THAT(r.status().message(),
                HasSubstr("rank 2 on host 'gpuhost' cannot take part: INTERNAL: "
                          "cudaGetDeviceCount: driver too old"));
  }
}

TEST(RendezvousTest, AHostWithoutGpusFailsEveryRankNamingIt) {
  const auto ranks = Meet({"cpu-only", "cpu-only"}, {0, 0});
  for (const auto& r : ranks) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(r.status().message(), HasSubstr("host 'cpu-only' runs 2 ranks but has 0 GPUs"));
  }
}

}  // namespace
}  // namespace reprise
