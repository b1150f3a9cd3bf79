// Inputs bound to caller memory and written into the engine's own buffer give the bits of
// SetInput; rebinding between steps patches the captured graph without re-instantiating.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 16, kFeatures = 12, kClasses = 4;

struct Batches {
  std::vector<std::vector<float>> x;
  std::vector<std::vector<int32_t>> y;
};

Batches MakeBatches(int count) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  Batches b;
  for (int i = 0; i < count; ++i) {
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> y(kBatch);
    for (int r = 0; r < kBatch; ++r) y[r] = (x[r * kFeatures] > 0) + 2 * (x[r * kFeatures + 1] > 0);
    b.x.push_back(std::move(x));
    b.y.push_back(std::move(y));
  }
  return b;
}

std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp) {
  TrainOptions options;
  options.seed = 5;
  auto t = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

models::Mlp Model() {
  return *models::BuildMlp(
      {.batch = kBatch, .input_features = kFeatures, .depth = 2, .width = 32, .classes = kClasses});
}

// Device copies of every batch, to bind by pointer.
struct DeviceBatches {
  std::vector<float*> x;
  std::vector<int32_t*> y;
  explicit DeviceBatches(const Batches& b) {
    for (size_t i = 0; i < b.x.size(); ++i) {
      float* dx = nullptr;
      int32_t* dy = nullptr;
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dx), b.x[i].size() * sizeof(float)),
                cudaSuccess);
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dy), b.y[i].size() * sizeof(int32_t)),
                cudaSuccess);
      cudaMemcpy(dx, b.x[i].data(), b.x[i].size() * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(dy, b.y[i].data(), b.y[i].size() * sizeof(int32_t), cudaMemcpyHostToDevice);
      x.push_back(dx);
      y.push_back(dy);
    }
    // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
    EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  ~DeviceBatches() {
    for (float* p : x) cudaFree(p);
    for (int32_t* p : y) cudaFree(p);
  }
};

TEST(BindingsGpuTest, RebindingEveryStepEqualsSetInputWithoutReinstantiating) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = Model();
  const int kSteps = 1000, kDistinct = 5;
  const Batches batches = MakeBatches(kDistinct);
  const DeviceBatches device(batches);
  auto copied = MakeTrainer(mlp);
  auto bound = MakeTrainer(mlp);
  ASSERT_TRUE(copied && bound);
  REPRISE_ASSERT_OK(bound->BindInput("features", device.x[0], kBatch * kFeatures * sizeof(float)));
  REPRISE_ASSERT_OK(bound->BindInput("labels", device.y[0], kBatch * sizeof(int32_t)));
  const TrainerStats after_binding = bound->stats();
  for (int s = 0; s < kSteps; ++s) {
    const int i = s % kDistinct;
    REPRISE_ASSERT_OK(copied->SetInput("features", batches.x[i]));
    REPRISE_ASSERT_OK(copied->SetInput("labels", batches.y[i]));
    REPRISE_ASSERT_OK(copied->Step());
    REPRISE_ASSERT_OK(
        bound->BindInput("features", device.x[i], kBatch * kFeatures * sizeof(float)));
    REPRISE_ASSERT_OK(bound->BindInput("labels", device.y[i], kBatch * sizeof(int32_t)));
    REPRISE_ASSERT_OK(bound->Step());
    if (s % 100 == 99) {
      ASSERT_EQ(*copied->Loss(), *bound->Loss()) << "step " << s;
    }
  }
  for (const std::string& name : copied->ParameterNames()) {
    EXPECT_EQ(*copied->GetParameter(name), *bound->GetParameter(name)) << name;
  }
  const TrainerStats stats = bound->stats();
  EXPECT_EQ(stats.graph_instantiations, after_binding.graph_instantiations);
  EXPECT_EQ(stats.graph_captures, after_binding.graph_captures);
  EXPECT_EQ(stats.graph_node_updates - after_binding.graph_node_updates, 2 * kSteps);
  EXPECT_EQ(stats.graph_replays, kSteps);
  // Device sources and a few staged scalars: the copies were one gather kernel, whose parameters
  // each rebinding updated (profiled last: profiling runs steps).
  auto launches = bound->ProfileLaunches(1);
  ASSERT_TRUE(launches.ok()) << launches.status();
  EXPECT_THAT((*launches)[0].kernel, ::testing::StartsWith("gather kernel")) << (*launches)[0].node;
}

// A bound input's bytes are not staged from the host as well (they would cross PCIe only to be
// overwritten): each binding takes exactly its bytes off the host copy, and unbinding puts them
// back.
TEST(BindingsGpuTest, BoundInputsAreNotStagedFromTheHost) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = Model();
  const Batches batches = MakeBatches(1);
  const DeviceBatches device(batches);
  auto trainer = MakeTrainer(mlp);
  ASSERT_TRUE(trainer);
  // Bytes the step copies from the host staging, and its bound copies, as copy_inputs says.
  auto staged = [&](int bound_copies) -> int64_t {
    auto launches = trainer->ProfileLaunches(1);
    EXPECT_TRUE(launches.ok()) << launches.status();
    for (const Trainer::LaunchTime& l : *launches) {
      if (l.node != "copy_inputs") continue;
      int64_t bytes = -1;
      // "memcpy H2D N bytes ..." or "gather kernel, H2D N bytes ...".
      const size_t h2d = l.kernel.find("H2D ");
      EXPECT_NE(h2d, std::string::npos) << l.kernel;
      if (h2d == std::string::npos) return -1;
      EXPECT_EQ(std::sscanf(l.kernel.c_str() + h2d, "H2D %lld bytes",
                            reinterpret_cast<long long*>(&bytes)),
                1)
          << l.kernel;
      if (bound_copies > 0) {
        EXPECT_THAT(l.kernel, HasSubstr(absl::StrCat(" + ", bound_copies, " bound input copies")));
      }
      return bytes;
    }
    ADD_FAILURE() << "no copy_inputs launch";
    return -1;
  };
  const int64_t features = kBatch * kFeatures * 4, labels = kBatch * 4;
  const int64_t all = staged(0);
  EXPECT_GE(all, features + labels);
  REPRISE_ASSERT_OK(trainer->BindInput("labels", device.y[0], labels));
  EXPECT_EQ(staged(1), all - labels);
  REPRISE_ASSERT_OK(trainer->BindInput("features", device.x[0], features));
  EXPECT_EQ(staged(2), all - labels - features);  // The inputs left unbound.
  REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK(trainer->BindInput("labels", nullptr, 0));
  EXPECT_EQ(staged(1), all - features);
  REPRISE_ASSERT_OK(trainer->Step());
  EXPECT_TRUE(std::isfinite(*trainer->Loss()));
}

TEST(BindingsGpuTest, PinnedHostBindingAndInputBufferMatchSetInput) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = Model();
  const Batches batches = MakeBatches(3);
  auto copied = MakeTrainer(mlp);
  auto pinned = MakeTrainer(mlp);
  auto zero_copy = MakeTrainer(mlp);
  ASSERT_TRUE(copied && pinned && zero_copy);
  float* host = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&host), kBatch * kFeatures * sizeof(float),
                          cudaHostAllocDefault),
            cudaSuccess);
  REPRISE_ASSERT_OK(pinned->BindInput("features", host, kBatch * kFeatures * sizeof(float)));
  for (int s = 0; s < 30; ++s) {
    const int i = s % 3;
    REPRISE_ASSERT_OK(copied->SetInput("features", batches.x[i]));
    REPRISE_ASSERT_OK(copied->SetInput("labels", batches.y[i]));
    REPRISE_ASSERT_OK(copied->Step());
    REPRISE_ASSERT_OK(pinned->Synchronize());  // The caller owns the pinned buffer: wait first.
    std::copy(batches.x[i].begin(), batches.x[i].end(), host);
    REPRISE_ASSERT_OK(pinned->SetInput("labels", batches.y[i]));
    REPRISE_ASSERT_OK(pinned->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(absl::Span<float> x, zero_copy->InputBuffer("features"));
    std::copy(batches.x[i].begin(), batches.x[i].end(), x.begin());
    REPRISE_ASSERT_OK_AND_ASSIGN(absl::Span<int32_t> y, zero_copy->InputBufferInt32("labels"));
    std::copy(batches.y[i].begin(), batches.y[i].end(), y.begin());
    REPRISE_ASSERT_OK(zero_copy->Step());
    ASSERT_EQ(*copied->Loss(), *pinned->Loss()) << "step " << s;
    ASSERT_EQ(*copied->Loss(), *zero_copy->Loss()) << "step " << s;
  }
  REPRISE_ASSERT_OK(pinned->Synchronize());
  cudaFreeHost(host);
}

TEST(BindingsGpuTest, BadBindingsAreClearErrors) {
  REPRISE_REQUIRE_GPU();
  const models::Mlp mlp = Model();
  auto t = MakeTrainer(mlp);
  ASSERT_TRUE(t);
  std::vector<float> pageable(kBatch * kFeatures);
  auto status = t->BindInput("features", pageable.data(), pageable.size() * sizeof(float));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("pageable host memory"));
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), pageable.size() * sizeof(float)),
            cudaSuccess);
  status = t->BindInput("features", device, 4);
  EXPECT_THAT(status.message(), HasSubstr("bound 4 bytes"));
  EXPECT_EQ(t->BindInput("nope", device, 4).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->InputBufferInt32("features").status().code(), absl::StatusCode::kInvalidArgument);
  REPRISE_ASSERT_OK(t->BindInput("features", device, pageable.size() * sizeof(float)));
  status = t->SetInput("features", pageable);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("unbind it with nullptr"));
  REPRISE_ASSERT_OK(t->BindInput("features", nullptr, 0));
  REPRISE_ASSERT_OK(t->SetInput("features", pageable));
  REPRISE_ASSERT_OK(t->Step());
  REPRISE_ASSERT_OK(t->Synchronize());
  cudaFree(device);
}

}  // namespace
}  // namespace reprise
