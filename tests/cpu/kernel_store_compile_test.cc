// NVRTC needs no GPU, so compiling, keying, prefetching and the disk layer under the store are
// tested on every machine. (Loading functions needs a GPU: tests/gpu/kernel_store_test.cc.)
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/cache_folder.h"
#include "src/runtime/disk_cache.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::runtime {
namespace {

using ::reprise::testing::Damage;
using ::reprise::testing::DamageEntry;
using ::reprise::testing::ReadFile;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

KernelSource Scale() {
  return KernelSource{
      .name = "scale_by_two",
      .code = R"(extern "C" __global__ void scale_by_two(int n, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
})",
      .options = {}};
}

TEST(CompileWithNvrtcTest, CompilesForSm90WithoutAGpu) {
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(Scale(), "sm_90");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_GE(compiled->cubin.size(), 4u);
  EXPECT_EQ(compiled->cubin.substr(0, 4),
            "\x7f"
            "ELF");  // A CUBIN is an ELF image.
  EXPECT_GT(compiled->compile_ms, 0.0);
}

TEST(CompileWithNvrtcTest, ReturnsThePtxBesideTheCubin) {
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(Scale(), "sm_90");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_THAT(compiled->ptx, HasSubstr(".entry scale_by_two"));
  EXPECT_THAT(compiled->ptx, HasSubstr(".target sm_90"));
  EXPECT_EQ(compiled->ptx.find('\0'), std::string::npos);
}

TEST(CompileWithNvrtcTest, PassesSourceOptionsToNvrtc) {
  KernelSource source = Scale();
  source.code = "#ifndef FACTOR\n#error FACTOR missing\n#endif\n" + source.code;
  source.options = {"-DFACTOR=3"};
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(source, "sm_90");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
}

TEST(CompileWithNvrtcTest, SyntaxErrorIsInvalidArgumentWithNameAndLog) {
  KernelSource source = Scale();
  source.name = "broken_kernel";
  source.code =
      R"(extern "C" __global__ void broken_kernel(float* y) { y[0] = undeclared_thing; })";
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(source, "sm_90");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("broken_kernel"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("NVRTC_ERROR_COMPILATION"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("undeclared_thing"));  // From NVRTC's log.
}

TEST(CompileWithNvrtcTest, UnknownArchitectureIsInvalidArgument) {
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(Scale(), "sm_1");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("scale_by_two"));
}

TEST(KernelStoreKeyTest, IsStableHexSha256) {
  const std::string key = KernelStore::Key(Scale(), "sm_90");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(KernelStore::Key(Scale(), "sm_90"), key);
}

TEST(KernelStoreKeyTest, ChangesWithCodeOptionsArchAndName) {
  const KernelSource base = Scale();
  const std::string key = KernelStore::Key(base, "sm_90");

  KernelSource code = base;
  code.code += " ";
  EXPECT_NE(KernelStore::Key(code, "sm_90"), key);

  KernelSource options = base;
  options.options = {"-DX=1"};
  EXPECT_NE(KernelStore::Key(options, "sm_90"), key);

  EXPECT_NE(KernelStore::Key(base, "sm_80"), key);

  KernelSource name = base;
  name.name = "scale_by_three";
  EXPECT_NE(KernelStore::Key(name, "sm_90"), key);
}

// Without length prefixes these pairs would hash the same bytes.
TEST(KernelStoreKeyTest, FieldBoundariesMatter) {
  KernelSource one = Scale();
  one.options = {"-DA", "-DB"};
  KernelSource two = Scale();
  two.options = {"-DA-DB"};
  EXPECT_NE(KernelStore::Key(one, "sm_90"), KernelStore::Key(two, "sm_90"));

  KernelSource three = Scale();
  three.options = {""};
  EXPECT_NE(KernelStore::Key(three, "sm_90"), KernelStore::Key(Scale(), "sm_90"));
}

// A second tiny kernel, so that prefetch tests have more than one to compile.
KernelSource Negate() {
  return KernelSource{.name = "negate",
                      .code = R"(extern "C" __global__ void negate(int n, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = -y[i];
})",
                      .options = {}};
}

std::unique_ptr<CubinLayer> DiskLayer(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<DiskCache>> disk = DiskCache::Open({.dir = dir});
  EXPECT_TRUE(disk.ok()) << disk.status();
  return disk.ok() ? *std::move(disk) : nullptr;
}

TEST(KernelStorePrefetchTest, CompilesEachDistinctKernelOnce) {
  KernelStore store("sm_90");
  ASSERT_TRUE(store.Prefetch({Scale(), Negate(), Scale()}).ok());
  KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.compiles, 2);
  EXPECT_EQ(stats.cubin_misses, 2);
  EXPECT_EQ(stats.cubin_hits, 1);
  EXPECT_EQ(stats.lower_hits + stats.lower_misses, 0);  // No lower layer.
  EXPECT_EQ(stats.loads, 0);                            // Prefetch loads nothing.

  // Now in memory: no compile, and the PTX is kept beside the CUBIN.
  absl::StatusOr<KernelBinary> binary = store.GetBinary(Negate());
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ(binary->name, "negate");
  EXPECT_EQ(binary->arch, "sm_90");
  EXPECT_THAT(binary->ptx, HasSubstr(".entry negate"));
  stats = store.stats();
  EXPECT_EQ(stats.compiles, 2);
  EXPECT_EQ(stats.cubin_hits, 2);
}

TEST(KernelStorePrefetchTest, ReportsTheFailingKernelAndCompilesTheRest) {
  KernelSource broken = Scale();
  broken.name = "broken_kernel";
  broken.code = R"(extern "C" __global__ void broken_kernel() { nonsense; })";
  KernelStore store("sm_90");
  absl::Status status = store.Prefetch({Negate(), broken});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("broken_kernel"));
  const KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.compile_failures, 1);
}

// TrainOptions::on_compile_progress is fed from here: 0 of N first, then one call per kernel
// ready (from memory too), one at a time, ending at N.
TEST(KernelStorePrefetchTest, ReportsProgressPerKernelEndingAtTheTotal) {
  KernelStore store("sm_90");
  std::vector<std::pair<int64_t, int64_t>> calls;
  const auto on_ready = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  ASSERT_TRUE(store.Prefetch({Scale(), Negate(), Scale()}, on_ready).ok());
  ASSERT_EQ(calls.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(calls[i], std::make_pair(i, int64_t{3}));

  calls.clear();  // A second prefetch of kernels in memory still reports each one.
  ASSERT_TRUE(store.Prefetch({Negate()}, on_ready).ok());
  EXPECT_THAT(calls, ::testing::ElementsAre(std::make_pair(int64_t{0}, int64_t{1}),
                                            std::make_pair(int64_t{1}, int64_t{1})));
}

TEST(KernelStoreDiskTest, SecondStoreOverTheSameFolderHitsOnDiskWithoutCompiling) {
  ScopedTempDir dir;
  KernelBinary first_binary;
  {
    KernelStore first("sm_90", DiskLayer(dir.path()));
    ASSERT_TRUE(first.Prefetch({Scale(), Negate()}).ok());
    const KernelStore::Stats stats = first.stats();
    EXPECT_EQ(stats.compiles, 2);
    EXPECT_EQ(stats.lower_misses, 2);
    EXPECT_EQ(stats.lower_hits, 0);
    first_binary = *first.GetBinary(Scale());
  }
  KernelStore second("sm_90", DiskLayer(dir.path()));
  ASSERT_TRUE(second.Prefetch({Scale(), Negate()}).ok());
  const KernelStore::Stats stats = second.stats();
  EXPECT_EQ(stats.compiles, 0);
  EXPECT_EQ(stats.lower_hits, 2);
  EXPECT_EQ(stats.corrupt_discarded, 0);
  absl::StatusOr<KernelBinary> binary = second.GetBinary(Scale());
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ(binary->cubin, first_binary.cubin);
  EXPECT_EQ(binary->ptx, first_binary.ptx);
}

TEST(KernelStoreDiskTest, AnotherArchitectureMissesOnDisk) {
  ScopedTempDir dir;
  { ASSERT_TRUE(KernelStore("sm_90", DiskLayer(dir.path())).Prefetch({Negate()}).ok()); }
  KernelStore other("sm_80", DiskLayer(dir.path()));
  ASSERT_TRUE(other.Prefetch({Negate()}).ok());
  EXPECT_EQ(other.stats().lower_hits, 0);
  EXPECT_EQ(other.stats().compiles, 1);
}

// One good entry, compiled once for the whole suite, copied into each test's folder.
class DamagedDiskEntryTest : public ::testing::TestWithParam<Damage> {
 protected:
  static void SetUpTestSuite() {
    ScopedTempDir dir;
    KernelStore store("sm_90", DiskLayer(dir.path()));
    ASSERT_TRUE(store.Prefetch({Negate()}).ok());
    good_entry_ = new std::string(ReadFile(CacheEntryPath(dir.path(), Key())));
  }
  static void TearDownTestSuite() {
    delete good_entry_;
    good_entry_ = nullptr;
  }
  static std::string Key() { return KernelStore::Key(Negate(), "sm_90"); }

  static std::string* good_entry_;
};
std::string* DamagedDiskEntryTest::good_entry_ = nullptr;

TEST_P(DamagedDiskEntryTest, IsDiscardedRecompiledAndCounted) {
  ASSERT_NE(good_entry_, nullptr);
  ScopedTempDir dir;
  const std::string path = CacheEntryPath(dir.path(), Key());
  WriteFile(path, *good_entry_);
  DamageEntry(path, GetParam());

  KernelStore store("sm_90", DiskLayer(dir.path()));
  ::testing::internal::CaptureStderr();
  const absl::Status status = store.Prefetch({Negate()});
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(status.ok()) << status;
  const KernelStore::Stats stats = store.stats();
  EXPECT_EQ(stats.lower_hits, 0);
  EXPECT_EQ(stats.corrupt_discarded, 1);
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_THAT(warning, HasSubstr(path));

  // The recompiled kernel was stored again, whole.
  absl::StatusOr<VerifyResult> verified = VerifyCacheFolder(dir.path());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->good, 1);
  EXPECT_THAT(verified->bad, IsEmpty());
  EXPECT_EQ(ReadFile(path), *good_entry_);
}

INSTANTIATE_TEST_SUITE_P(EveryDamage, DamagedDiskEntryTest,
                         ::testing::ValuesIn(testing::kAllDamage),
                         [](const ::testing::TestParamInfo<Damage>& info) {
                           return testing::DamageName(info.param);
                         });

}  // namespace
}  // namespace reprise::runtime
