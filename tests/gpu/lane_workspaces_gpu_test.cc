// Lane workspaces are backed only as far as the chosen algorithms need: the reserve is address
// space, the mapped granules are memory, and a trainer reports (and holds) only what its lanes'
// launches use.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/trainer_impl.h"
#include "src/runtime/lane_workspaces.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

constexpr size_t kMiB = 1 << 20;

TEST(LaneWorkspacesGpuTest, BacksWhatIsNeededAndReleasesTheRest) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t used_before, runtime::DeviceMemoryInUse());
  {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto w, runtime::LaneWorkspaces::Create(2, 64 * kMiB));
    EXPECT_EQ(w->mapped_bytes(), 0);
    EXPECT_GE(w->reserve_bytes(), 64 * kMiB);
    REPRISE_ASSERT_OK(w->Settle({3 * kMiB, 0}));
    const std::vector<int64_t> backed = w->mapped_per_lane();
    ASSERT_EQ(backed.size(), 2u);
    EXPECT_GE(backed[0], static_cast<int64_t>(3 * kMiB));
    EXPECT_LT(backed[0], static_cast<int64_t>(64 * kMiB));
    EXPECT_EQ(backed[1], 0);
    // The backed bytes are usable memory: written and read back.
    REPRISE_ASSERT_OK(cudaMemset(w->lane(0), 0x5a, 3 * kMiB));
    std::vector<unsigned char> back(3 * kMiB);
    REPRISE_ASSERT_OK(cudaMemcpy(back.data(), w->lane(0), back.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(back.front(), 0x5a);
    EXPECT_EQ(back.back(), 0x5a);
    // Measuring backs everything; settling again keeps the high-water mark of every user.
    REPRISE_ASSERT_OK(w->MapAll());
    EXPECT_EQ(w->mapped_bytes(), static_cast<int64_t>(2 * w->reserve_bytes()));
    REPRISE_ASSERT_OK(w->Settle({kMiB}));
    EXPECT_EQ(w->mapped_per_lane(), backed);
    const absl::Status too_much = w->Settle({0, 65 * kMiB + w->reserve_bytes()});
    EXPECT_EQ(too_much.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(too_much.message(), "lane 1 needs")) << too_much;
    EXPECT_EQ(w->Settle({0, 0, 0}).code(), absl::StatusCode::kInvalidArgument);
    // Each lane's tickets: always backed, zero, apart from the other lane's.
    constexpr int64_t kWords = runtime::LaneWorkspaces::kTicketWords;
    EXPECT_EQ(w->ticket_bytes(), static_cast<int64_t>(2 * kWords * sizeof(unsigned)));
    EXPECT_EQ(w->tickets(1), w->tickets(0) + kWords);
    EXPECT_EQ(w->tickets(2), nullptr);
    std::vector<unsigned> tickets(2 * kWords, 1u);
    REPRISE_ASSERT_OK(cudaMemcpy(tickets.data(), w->tickets(0), tickets.size() * sizeof(unsigned),
                                 cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::count(tickets.begin(), tickets.end(), 0u), 2 * kWords);
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t used_after, runtime::DeviceMemoryInUse());
  EXPECT_EQ(used_after, used_before);  // Unmapped, released and the reserve freed.
}

// A convolutional network on two lanes: each lane is backed by exactly the granules its launches'
// largest workspace needs, not the 256 MiB reserve, and the step still trains (the bits of two
// lanes equal one lane's elsewhere, tests/gpu/lanes_gpu_test.cc).
TEST(LaneWorkspacesGpuTest, TrainerBacksEachLaneByItsLaunches) {
  REPRISE_REQUIRE_GPU();
  auto net = models::BuildResNet({.depth = 18, .batch = 4, .classes = 4, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  for (bool measure : {false, true}) {
    TrainOptions options;
    options.launch.lanes = 2;
    options.kernels.measure_conv_algorithms = measure;
    auto impl = Trainer::Impl::Create(net->graph, net->loss, options);
    ASSERT_TRUE(impl.ok()) << impl.status();
    std::vector<size_t> needs(2, 0);
    for (const capture::LoweredLaunch& launch : (*impl)->launches()) {
      ASSERT_LT(launch.lane, 2);
      needs[launch.lane] = std::max(needs[launch.lane], launch.kernel->WorkspaceBytes());
    }
    const TrainerReport report = (*impl)->Report();
    ASSERT_EQ(report.workspace_per_lane.size(), 2u);
    int64_t total = 0;
    for (int lane = 0; lane < 2; ++lane) {
      const int64_t backed = report.workspace_per_lane[lane];
      total += backed;
      EXPECT_GE(backed, static_cast<int64_t>(needs[lane])) << "lane " << lane;
      EXPECT_LT(backed, static_cast<int64_t>(needs[lane] + 2 * kMiB + 1)) << "lane " << lane;
    }
    EXPECT_EQ((*impl)->stats().workspace_bytes, total);
    EXPECT_LT(total, static_cast<int64_t>(512 * kMiB));
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::vector<float> x(4 * 3 * 32 * 32);
    float first = 0, last = 0;
    for (int s = 0; s < 6; ++s) {
      for (float& v : x) v = normal(rng);
      REPRISE_ASSERT_OK((*impl)->SetInput("images", x.data(), x.size(), DType::kFloat32));
      const std::vector<int32_t> labels{0, 1, 2, 3};
      REPRISE_ASSERT_OK((*impl)->SetInput("labels", labels.data(), labels.size(), DType::kInt32));
      REPRISE_ASSERT_OK((*impl)->Step());
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> loss,
                                   (*impl)->ReadFloat((*impl)->loss()));
      (s == 0 ? first : last) = loss[0];
    }
    EXPECT_TRUE(std::isfinite(last)) << "measure=" << measure;
    EXPECT_NE(first, last) << "measure=" << measure;
  }
}

}  // namespace
}  // namespace reprise
