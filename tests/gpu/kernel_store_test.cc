#include "src/runtime/kernel_store.h"

#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/device.h"
#include "src/runtime/disk_cache.h"
#include "src/runtime/owners.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::runtime {
namespace {

using ::testing::HasSubstr;

// __fmul_rn/__fadd_rn keep NVRTC from contracting into an FMA, so the result is exactly the
// host's a * x + y in float.
KernelSource Axpy() {
  return KernelSource{
      .name = "store_test_axpy",
      .code = R"(extern "C" __global__ void store_test_axpy(int n, float a, const float* x,
                                                           float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
})",
      .options = {}};
}

class KernelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK_AND_ASSIGN(device_, UseDevice(0));
  }
  DeviceInfo device_;
};

TEST_F(KernelStoreTest, LaunchedKernelComputesAxpy) {
  KernelStore store(device_.ArchFlag());
  REPRISE_ASSERT_OK_AND_ASSIGN(CUfunction function, store.GetFunction(Axpy()));

  constexpr int kN = 1000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = uniform(rng);
    y[i] = uniform(rng);
  }
  float a = 1.5f;
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer dx, DeviceBuffer::Create(kN * sizeof(float)));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer dy, DeviceBuffer::Create(kN * sizeof(float)));
  REPRISE_ASSERT_OK(cudaMemcpy(dx.data(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  REPRISE_ASSERT_OK(cudaMemcpy(dy.data(), y.data(), dy.bytes(), cudaMemcpyHostToDevice));
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
  REPRISE_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(const DriverApi* driver, Driver());

  int n = kN;
  void* x_ptr = dx.data();
  void* y_ptr = dy.data();
  void* args[] = {&n, &a, &x_ptr, &y_ptr};
  REPRISE_ASSERT_OK(driver->launch_kernel(function, (kN + 127) / 128, 1, 1, 128, 1, 1, 0,
                                          stream.get(), args, nullptr));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
  std::vector<float> out(kN);
  REPRISE_ASSERT_OK(cudaMemcpy(out.data(), dy.data(), dy.bytes(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) {
    ASSERT_FLOAT_EQ(out[i], a * x[i] + y[i]) << "at " << i;
  }
}

TEST_F(KernelStoreTest, PrefetchedKernelLoadsWithoutCompiling) {
  KernelStore store(device_.ArchFlag());
  REPRISE_ASSERT_OK(store.Prefetch({Axpy()}));
  REPRISE_ASSERT_OK(store.GetFunction(Axpy()).status());
  const KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.cubin_hits, 1);  // GetFunction found the prefetched CUBIN.
  EXPECT_EQ(stats.memory_misses, 1);
  EXPECT_EQ(stats.loads, 1);
}

TEST_F(KernelStoreTest, KernelFromTheDiskLoadsAndRuns) {
  testing::ScopedTempDir dir;
  {
    REPRISE_ASSERT_OK_AND_ASSIGN(auto disk, DiskCache::Open({.dir = dir.path()}));
    KernelStore first(device_.ArchFlag(), std::move(disk));
    REPRISE_ASSERT_OK(first.Prefetch({Axpy()}));
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(auto disk, DiskCache::Open({.dir = dir.path()}));
  KernelStore store(device_.ArchFlag(), std::move(disk));
  REPRISE_ASSERT_OK_AND_ASSIGN(CUfunction function, store.GetFunction(Axpy()));
  EXPECT_EQ(store.stats().compiles, 0);
  EXPECT_EQ(store.stats().lower_hits, 1);

  constexpr int kN = 256;
  std::vector<float> x(kN, 2.0f), y(kN, 1.0f);
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer dx, DeviceBuffer::Create(kN * sizeof(float)));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer dy, DeviceBuffer::Create(kN * sizeof(float)));
  REPRISE_ASSERT_OK(cudaMemcpy(dx.data(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  REPRISE_ASSERT_OK(cudaMemcpy(dy.data(), y.data(), dy.bytes(), cudaMemcpyHostToDevice));
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
  REPRISE_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(const DriverApi* driver, Driver());
  int n = kN;
  float a = 3.0f;
  void* x_ptr = dx.data();
  void* y_ptr = dy.data();
  void* args[] = {&n, &a, &x_ptr, &y_ptr};
  REPRISE_ASSERT_OK(
      driver->launch_kernel(function, 2, 1, 1, 128, 1, 1, 0, stream.get(), args, nullptr));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
  REPRISE_ASSERT_OK(cudaMemcpy(y.data(), dy.data(), dy.bytes(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(y[i], 7.0f) << "at " << i;
}

TEST_F(KernelStoreTest, SecondRequestIsAMemoryHit) {
  KernelStore store(device_.ArchFlag());
  REPRISE_ASSERT_OK_AND_ASSIGN(CUfunction first, store.GetFunction(Axpy()));
  REPRISE_ASSERT_OK_AND_ASSIGN(CUfunction second, store.GetFunction(Axpy()));
  EXPECT_EQ(first, second);
  const KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.loads, 1);
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_GT(stats.compile_ms, 0.0);
}

TEST_F(KernelStoreTest, ConcurrentRequestsForOneKernelCompileOnce) {
  KernelStore store(device_.ArchFlag());
  constexpr int kThreads = 8;
  std::vector<CUfunction> functions(kThreads);
  std::vector<absl::Status> statuses(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // The runtime makes the primary context current for runtime calls only; set it here too.
      statuses[t] = CudaStatus(cudaSetDevice(device_.ordinal), "cudaSetDevice");
      if (!statuses[t].ok()) return;
      absl::StatusOr<CUfunction> function = store.GetFunction(Axpy());
      statuses[t] = function.status();
      if (function.ok()) functions[t] = *function;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(statuses[t].ok()) << statuses[t];
    EXPECT_EQ(functions[t], functions[0]);
  }
  const KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.loads, 1);
  EXPECT_EQ(stats.memory_hits, kThreads - 1);
}

TEST_F(KernelStoreTest, CompileErrorNamesTheKernel) {
  KernelStore store(device_.ArchFlag());
  KernelSource broken = Axpy();
  broken.code += "\nthis is not C++";
  absl::StatusOr<CUfunction> function = store.GetFunction(broken);
  ASSERT_FALSE(function.ok());
  EXPECT_EQ(function.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(function.status().message(), HasSubstr("store_test_axpy"));
  EXPECT_EQ(store.stats().compiles, 0);
}

TEST_F(KernelStoreTest, MissingFunctionNameIsNotFound) {
  KernelStore store(device_.ArchFlag());
  KernelSource misnamed = Axpy();
  misnamed.name = "no_such_kernel";
  absl::StatusOr<CUfunction> function = store.GetFunction(misnamed);
  ASSERT_FALSE(function.ok());
  EXPECT_EQ(function.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(function.status().message(), HasSubstr("no_such_kernel"));
}

}  // namespace
}  // namespace reprise::runtime
