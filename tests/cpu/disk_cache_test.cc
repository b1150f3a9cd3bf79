#include "src/runtime/disk_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/cache_entry.h"
#include "src/runtime/cache_folder.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::runtime {
namespace {

using ::reprise::testing::Damage;
using ::reprise::testing::DamageEntry;
using ::reprise::testing::Exists;
using ::reprise::testing::LastUse;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::SetLastUse;
using ::reprise::testing::TestKey;
using ::reprise::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A stand-in for a compiled kernel: the disk layer never looks inside the CUBIN.
KernelBinary FakeBinary(const std::string& label, size_t bytes = 4096) {
  std::string cubin(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) cubin[i] = static_cast<char>(label[i % label.size()] + i);
  return KernelBinary{.name = label, .arch = "sm_90", .cubin = cubin, .ptx = "// ptx of " + label};
}

int Occurrences(absl::string_view text, absl::string_view part) {
  int count = 0;
  for (size_t at = text.find(part); at != absl::string_view::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

bool SameBinary(const KernelBinary& a, const KernelBinary& b) {
  return a.name == b.name && a.arch == b.arch && a.cubin == b.cubin && a.ptx == b.ptx;
}

std::unique_ptr<DiskCache> OpenOrDie(const std::string& dir,
                                     int64_t max_bytes = kDefaultCacheMaxBytes) {
  absl::StatusOr<std::unique_ptr<DiskCache>> cache =
      DiskCache::Open({.dir = dir, .max_bytes = max_bytes});
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

TEST(DiskCacheTest, OpenCreatesTheFolderAndParents) {
  ScopedTempDir root;
  const std::string dir = root.path() + "/a/b/kernels";
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(Exists(dir));
  EXPECT_EQ(cache->dir(), dir);
}

TEST(DiskCacheTest, OpenWhereAFileBlocksTheFolderIsInternalNamingIt) {
  ScopedTempDir root;
  const std::string blocked = root.path() + "/file";
  WriteFile(blocked, "x");
  absl::StatusOr<std::unique_ptr<DiskCache>> cache = DiskCache::Open({.dir = blocked});
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(cache.status().message(), HasSubstr(blocked));
}

TEST(DiskCacheTest, OpenRefusesAnEmptyFolderOrCap) {
  EXPECT_EQ(DiskCache::Open({.dir = ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiskCache::Open({.dir = "/tmp", .max_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DiskCacheTest, StoredBinaryIsFoundByAnotherInstance) {
  ScopedTempDir dir;
  OpenOrDie(dir.path())->Store(TestKey("a"), FakeBinary("a"));
  std::unique_ptr<DiskCache> second = OpenOrDie(dir.path());
  std::optional<KernelBinary> found = second->Find(TestKey("a"));
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(SameBinary(*found, FakeBinary("a")));
  EXPECT_EQ(second->stats().corrupt_discarded, 0);
}

TEST(DiskCacheTest, MissIsNotCorruption) {
  ScopedTempDir dir;
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  EXPECT_FALSE(cache->Find(TestKey("nothing")).has_value());
  EXPECT_EQ(cache->stats().corrupt_discarded, 0);
}

TEST(DiskCacheTest, StoreLeavesNoTemporaryFiles) {
  ScopedTempDir dir;
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  for (const char* label : {"a", "b", "c"}) cache->Store(TestKey(label), FakeBinary(label));
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->entries.size(), 3u);
  EXPECT_THAT(listing->temporaries, IsEmpty());
  EXPECT_EQ(cache->stats().stores, 3);
}

class DamagedEntryTest : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedEntryTest, IsDiscardedCountedAndReportedNeverReturned) {
  ScopedTempDir dir;
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  const std::string key = TestKey("victim");
  const std::string path = CacheEntryPath(dir.path(), key);
  cache->Store(key, FakeBinary("victim"));
  DamageEntry(path, GetParam());

  ::testing::internal::CaptureStderr();
  const std::optional<KernelBinary> found = cache->Find(key);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(found.has_value());
  EXPECT_EQ(cache->stats().corrupt_discarded, 1);
  EXPECT_FALSE(Exists(path)) << "a bad entry must be deleted";
  EXPECT_THAT(warning, HasSubstr(path));

  // Gone now: a plain miss, then a fresh store serves again.
  EXPECT_FALSE(cache->Find(key).has_value());
  EXPECT_EQ(cache->stats().corrupt_discarded, 1);
  cache->Store(key, FakeBinary("victim"));
  const std::optional<KernelBinary> again = cache->Find(key);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(SameBinary(*again, FakeBinary("victim")));
}

INSTANTIATE_TEST_SUITE_P(EveryDamage, DamagedEntryTest, ::testing::ValuesIn(testing::kAllDamage),
                         [](const ::testing::TestParamInfo<Damage>& info) {
                           return testing::DamageName(info.param);
                         });

TEST(DiskCacheTest, WarnsOncePerEntryButCountsEveryDiscard) {
  ScopedTempDir dir;
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  const std::string key = TestKey("twice");
  ::testing::internal::CaptureStderr();
  for (int round = 0; round < 2; ++round) {
    cache->Store(key, FakeBinary("twice"));
    DamageEntry(CacheEntryPath(dir.path(), key), Damage::kTruncated);
    EXPECT_FALSE(cache->Find(key).has_value());
  }
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cache->stats().corrupt_discarded, 2);
  EXPECT_EQ(Occurrences(warnings, "compiling it again"), 1) << warnings;
}

TEST(DiskCacheTest, HitMarksTheEntryRecentlyUsed) {
  ScopedTempDir dir;
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  cache->Store(TestKey("a"), FakeBinary("a"));
  const std::string path = CacheEntryPath(dir.path(), TestKey("a"));
  SetLastUse(path, absl::FromUnixSeconds(1'600'000'000));
  ASSERT_TRUE(cache->Find(TestKey("a")).has_value());
  EXPECT_GT(LastUse(path), absl::Now() - absl::Minutes(5));
}

TEST(DiskCacheTest, StoreKeepsTheCapByPruningLeastRecentlyUsedFirst) {
  ScopedTempDir dir;
  const int64_t entry_bytes =
      static_cast<int64_t>(EncodeCacheEntry(TestKey("a"), FakeBinary("a")).size());
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path(), 3 * entry_bytes + entry_bytes / 2);
  const absl::Time long_ago = absl::FromUnixSeconds(1'600'000'000);
  for (int i = 0; i < 3; ++i) {
    const std::string label(1, static_cast<char>('a' + i));
    cache->Store(TestKey(label), FakeBinary(label));
    SetLastUse(CacheEntryPath(dir.path(), TestKey(label)), long_ago + absl::Seconds(i));
  }
  // "a" is the oldest by its time, until a hit makes it the newest; then "b" is the oldest.
  ASSERT_TRUE(cache->Find(TestKey("a")).has_value());
  cache->Store(TestKey("d"), FakeBinary("d"));

  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok());
  EXPECT_LE(listing->entry_bytes, cache->max_bytes());
  EXPECT_FALSE(Exists(CacheEntryPath(dir.path(), TestKey("b"))));
  for (const char* kept : {"a", "c", "d"}) {
    EXPECT_TRUE(Exists(CacheEntryPath(dir.path(), TestKey(kept)))) << kept;
  }
  EXPECT_EQ(cache->stats().pruned, 1);
}

TEST(DiskCacheTest, StoreFailureIsCountedAndReportedOnceNotFatal) {
  ScopedTempDir root;
  const std::string dir = root.path() + "/kernels";
  std::unique_ptr<DiskCache> cache = OpenOrDie(dir);
  std::filesystem::remove_all(dir);
  ::testing::internal::CaptureStderr();
  cache->Store(TestKey("a"), FakeBinary("a"));
  cache->Store(TestKey("b"), FakeBinary("b"));
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cache->stats().store_failures, 2);
  EXPECT_THAT(warnings, HasSubstr(dir));
  EXPECT_EQ(Occurrences(warnings, "compiled again next time"), 1) << warnings;
  EXPECT_FALSE(cache->Find(TestKey("a")).has_value());
}

TEST(DiskCacheFromEnvironmentTest, OffMeansNoLayer) {
  EXPECT_EQ(DiskCacheFromEnvironment({.cache_dir = "off", .home = "/home/u"}), nullptr);
}

TEST(DiskCacheFromEnvironmentTest, FolderAndCapFromTheEnvironment) {
  ScopedTempDir root;
  std::unique_ptr<CubinLayer> layer =
      DiskCacheFromEnvironment({.xdg_cache_home = root.path(), .max_bytes = "1M"});
  ASSERT_NE(layer, nullptr);
  auto* disk = dynamic_cast<DiskCache*>(layer.get());
  ASSERT_NE(disk, nullptr);
  EXPECT_EQ(disk->dir(), root.path() + "/reprise/kernels");
  EXPECT_EQ(disk->max_bytes(), 1 << 20);
  EXPECT_TRUE(Exists(root.path() + "/reprise/kernels"));
}

TEST(DiskCacheFromEnvironmentTest, UnusableFolderWarnsAndGivesNoLayer) {
  ScopedTempDir root;
  WriteFile(root.path() + "/file", "x");
  ::testing::internal::CaptureStderr();
  std::unique_ptr<CubinLayer> layer =
      DiskCacheFromEnvironment({.cache_dir = root.path() + "/file/kernels"});
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(layer, nullptr);
  EXPECT_THAT(warning, HasSubstr("kernel cache off"));
}

// Four processes fill one folder at once, storing the same shared kernels (and overwriting them,
// to race renames against reads) and some of their own. No reader may ever see a bad entry, and
// afterwards every entry must be there and pass verification.
constexpr int kProcesses = 4;
constexpr int kShared = 16;
constexpr int kOwn = 6;

std::string SharedLabel(int i) { return absl::StrCat("shared_", i); }
std::string OwnLabel(int process, int i) { return absl::StrCat("own_", process, "_", i); }
KernelBinary BigBinary(const std::string& label) { return FakeBinary(label, 96 * 1024); }

// Runs in a child: returns its exit code, 0 when everything it saw was right.
int FillFolder(const std::string& dir, int process) {
  absl::StatusOr<std::unique_ptr<DiskCache>> opened =
      DiskCache::Open({.dir = dir, .max_bytes = int64_t{1} << 30});
  if (!opened.ok()) return 10;
  DiskCache& cache = **opened;
  for (int round = 0; round < 3; ++round) {
    for (int n = 0; n < kShared; ++n) {
      const std::string label = SharedLabel((n + process * 5) % kShared);
      std::optional<KernelBinary> found = cache.Find(TestKey(label));
      if (found.has_value() && !SameBinary(*found, BigBinary(label))) return 11;
      if (!found.has_value() || round == 0) cache.Store(TestKey(label), BigBinary(label));
    }
    for (int i = 0; i < kOwn; ++i) {
      cache.Store(TestKey(OwnLabel(process, i)), BigBinary(OwnLabel(process, i)));
    }
  }
  for (int n = 0; n < kShared; ++n) {
    std::optional<KernelBinary> found = cache.Find(TestKey(SharedLabel(n)));
    if (!found.has_value() || !SameBinary(*found, BigBinary(SharedLabel(n)))) return 12;
  }
  const CubinLayer::Stats stats = cache.stats();
  if (stats.corrupt_discarded != 0) return 13;
  if (stats.store_failures != 0) return 14;
  return 0;
}

TEST(DiskCacheProcessTest, FourProcessesFillingOneFolderLoseAndCorruptNothing) {
  ScopedTempDir dir;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork";
    if (pid == 0) ::_exit(FillFolder(dir.path(), p));  // No gtest teardown in the child.
    children.push_back(pid);
  }
  for (int p = 0; p < kProcesses; ++p) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[p], &status, 0), children[p]);
    ASSERT_TRUE(WIFEXITED(status)) << "process " << p << " did not exit normally";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "process " << p;
  }
  absl::StatusOr<VerifyResult> verified = VerifyCacheFolder(dir.path());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_THAT(verified->bad, IsEmpty());
  EXPECT_EQ(verified->good, kShared + kProcesses * kOwn);
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(listing->temporaries, IsEmpty());

  std::unique_ptr<DiskCache> cache = OpenOrDie(dir.path());
  for (int n = 0; n < kShared; ++n) {
    std::optional<KernelBinary> found = cache->Find(TestKey(SharedLabel(n)));
    ASSERT_TRUE(found.has_value()) << SharedLabel(n);
    EXPECT_TRUE(SameBinary(*found, BigBinary(SharedLabel(n))));
  }
  for (int p = 0; p < kProcesses; ++p) {
    for (int i = 0; i < kOwn; ++i) {
      EXPECT_TRUE(cache->Find(TestKey(OwnLabel(p, i))).has_value()) << OwnLabel(p, i);
    }
  }
}

}  // namespace
}  // namespace reprise::runtime
