// The Trainer and the on-disk kernel cache: a second Trainer over the same folder loads every
// kernel from disk and compiles none, a damaged entry is compiled again and counted, and
// REPRISE_CACHE_DIR=off leaves the disk alone. (Separate from trainer_gpu_test.cc, which checks
// the numerics of the step.)
#include <cstdlib>
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
  options.mode = ExecMode::kBulked;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(mlp.graph, mlp.loss, options));
  return trainer->stats();
}

TEST(TrainerKernelCacheTest, SecondTrainerLoadsEveryKernelFromDisk) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir dir;
  ScopedEnv env("REPRISE_CACHE_DIR", dir.path());
  // Every generated kernel is prefetched; the plan's fused kernels come on top.
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats cold, CreateTrainerStats());
  const int64_t kernels = cold.kernels_compiled;
  EXPECT_GE(kernels, static_cast<int64_t>(codegen::AllKernels().size()));
  EXPECT_EQ(cold.kernel_disk_hits, 0);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult stored,
                               runtime::VerifyCacheFolder(dir.path()));
  EXPECT_EQ(stored.good, kernels);

  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats warm, CreateTrainerStats());
  EXPECT_EQ(warm.kernels_compiled, 0);
  EXPECT_EQ(warm.kernel_disk_hits, kernels);
  EXPECT_EQ(warm.kernel_cache_corrupt, 0);
  EXPECT_THAT(warm.ToString(), HasSubstr("disk hits"));
}

TEST(TrainerKernelCacheTest, DamagedEntryIsCompiledAgainAndCounted) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir dir;
  ScopedEnv env("REPRISE_CACHE_DIR", dir.path());
  REPRISE_ASSERT_OK(CreateTrainerStats().status());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CacheListing listing, runtime::ListCacheFolder(dir.path()));
  ASSERT_FALSE(listing.entries.empty());
  testing::DamageEntry(listing.entries.front().path, testing::Damage::kPayloadBitFlip);

  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernels_compiled, 1);
  EXPECT_EQ(stats.kernel_cache_corrupt, 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult verified,
                               runtime::VerifyCacheFolder(dir.path()));
  EXPECT_TRUE(verified.bad.empty());
}

TEST(TrainerKernelCacheTest, OffLeavesTheDiskAlone) {
  REPRISE_REQUIRE_GPU();
  ScopedEnv env("REPRISE_CACHE_DIR", "off");
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernel_disk_hits, 0);
  EXPECT_GE(stats.kernels_compiled, static_cast<int64_t>(codegen::AllKernels().size()));
}

}  // namespace
}  // namespace reprise
