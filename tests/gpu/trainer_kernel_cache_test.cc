// The Trainer and the kernel cache: the first Trainer compiles (cold), a second one in the same
// process reuses the process's store (hot), a store over a filled folder loads every kernel from
// disk (warm), a damaged entry is compiled again and counted, and REPRISE_CACHE_DIR=off leaves
// the disk alone. (Separate from trainer_gpu_test.cc, which checks
// the numerics of the step.)
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/codegen/generated_kernel.h"
#include "src/runtime/cache_folder.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// Sets an environment variable for the scope of a test, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

absl::StatusOr<TrainerStats> CreateTrainerStats() {
  ASSIGN_OR_RETURN(
      models::Mlp mlp,
      models::BuildMlp({.batch = 8, .input_features = 4, .depth = 1, .width = 16, .classes = 3}));
  TrainOptions options;
  options.launch.mode = ExecMode::kBulked;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(mlp.graph, mlp.loss, options));
  return trainer->stats();
}

// Copies every entry of one cache folder into another: entries are named by their key, so the
// copy is a warm cache for a store that has never seen them (as a new process would).
void CopyFolder(const std::string& from, const std::string& to) {
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy(entry.path(), std::filesystem::path(to) / entry.path().filename());
  }
}

TEST(TrainerKernelCacheTest, ColdCompilesHotReusesWarmLoadsFromDisk) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir cold_dir, warm_dir;
  int64_t kernels = 0;
  {
    ScopedEnv env("REPRISE_CACHE_DIR", cold_dir.path());
    // Every generated kernel is prefetched; the plan's fused kernels come on top.
    REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats cold, CreateTrainerStats());
    kernels = cold.kernels_compiled;
    EXPECT_GE(kernels, static_cast<int64_t>(codegen::AllKernels().size()));
    EXPECT_EQ(cold.kernel_disk_hits, 0);
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult stored,
                                 runtime::VerifyCacheFolder(cold_dir.path()));
    EXPECT_EQ(stored.good, kernels);
    // Hot: the process's store already holds every kernel.
    REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats hot, CreateTrainerStats());
    EXPECT_EQ(hot.kernels_compiled, 0);
    EXPECT_EQ(hot.kernel_disk_hits, 0);
  }
  CopyFolder(cold_dir.path(), warm_dir.path());
  ScopedEnv env("REPRISE_CACHE_DIR", warm_dir.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats warm, CreateTrainerStats());
  EXPECT_EQ(warm.kernels_compiled, 0);
  EXPECT_EQ(warm.kernel_disk_hits, kernels);
  EXPECT_EQ(warm.kernel_cache_corrupt, 0);
  EXPECT_THAT(warm.ToString(), HasSubstr("disk hits"));
}

TEST(TrainerKernelCacheTest, DamagedEntryIsCompiledAgainAndCounted) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir filled, damaged;
  {
    ScopedEnv env("REPRISE_CACHE_DIR", filled.path());
    REPRISE_ASSERT_OK(CreateTrainerStats().status());
  }
  CopyFolder(filled.path(), damaged.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CacheListing listing,
                               runtime::ListCacheFolder(damaged.path()));
  ASSERT_FALSE(listing.entries.empty());
  testing::DamageEntry(listing.entries.front().path, testing::Damage::kPayloadBitFlip);

  ScopedEnv env("REPRISE_CACHE_DIR", damaged.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernels_compiled, 1);
  EXPECT_EQ(stats.kernel_cache_corrupt, 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult verified,
                               runtime::VerifyCacheFolder(damaged.path()));
  EXPECT_TRUE(verified.bad.empty());
}

TEST(TrainerKernelCacheTest, OffLeavesTheDiskAlone) {
  REPRISE_REQUIRE_GPU();
  ScopedEnv env("REPRISE_CACHE_DIR", "off");
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernel_disk_hits, 0);
}

}  // namespace
}  // namespace reprise
