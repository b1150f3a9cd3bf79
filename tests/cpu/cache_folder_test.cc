#include "src/runtime/cache_folder.h"

#include <sys/stat.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/cache_entry.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::runtime {
namespace {

using ::reprise::testing::Exists;
using ::reprise::testing::LastUse;
using ::reprise::testing::ReadFile;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::SetLastUse;
using ::reprise::testing::TestKey;
using ::reprise::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kLongAgo = absl::FromUnixSeconds(1'600'000'000);

// Writes a good entry of `payload` bytes under key TestKey(label); returns its path.
std::string PutEntry(const std::string& dir, const std::string& label, size_t payload,
                     absl::Time last_use) {
  const std::string path = CacheEntryPath(dir, TestKey(label));
  WriteFile(path,
            EncodeCacheEntry(TestKey(label),
                             {.name = label, .arch = "sm_90", .cubin = std::string(payload, 'c')}));
  SetLastUse(path, last_use);
  return path;
}

std::vector<std::string> Keys(const CacheListing& listing) {
  std::vector<std::string> keys;
  for (const CacheFile& file : listing.entries) keys.push_back(file.key);
  return keys;
}

TEST(CacheFolderTest, EntryNamesAreSixtyFourHexDigitsAndRke) {
  std::string key;
  EXPECT_TRUE(IsCacheEntryName(TestKey("a") + ".rke", &key));
  EXPECT_EQ(key, TestKey("a"));
  EXPECT_FALSE(IsCacheEntryName(TestKey("a")));
  EXPECT_FALSE(IsCacheEntryName(TestKey("a") + ".tmp"));
  EXPECT_FALSE(IsCacheEntryName(TestKey("a").substr(1) + ".rke"));
  std::string upper = TestKey("a");
  upper[0] = 'G';
  EXPECT_FALSE(IsCacheEntryName(upper + ".rke"));
  EXPECT_FALSE(IsCacheEntryName(".tmp." + TestKey("a") + ".rke.1.2.3"));
}

TEST(CacheFolderTest, WriteFileAtomicallyReplacesAndLeavesNoTemporary) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/" + TestKey("a") + ".rke";
  ASSERT_TRUE(WriteFileAtomically(dir.path(), path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(dir.path(), path, "second").ok());
  EXPECT_EQ(ReadFile(path), "second");
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->temporaries, IsEmpty());
  EXPECT_EQ(listing->entries.size(), 1u);
}

TEST(CacheFolderTest, WriteFileAtomicallyIntoAMissingFolderIsInternalNamingThePath) {
  ScopedTempDir dir;
  const std::string missing = dir.path() + "/missing";
  absl::Status status = WriteFileAtomically(missing, missing + "/x.rke", "bytes");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr(missing));
}

TEST(CacheFolderTest, ReadCacheFileMissingIsNotFound) {
  ScopedTempDir dir;
  EXPECT_EQ(ReadCacheFile(dir.path() + "/nothing", false, nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CacheFolderTest, ReadCacheFileOfANamedPipeIsRefusedWithoutWaiting) {
  ScopedTempDir dir;
  const std::string fifo = dir.path() + "/" + TestKey("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens it: an open that waited for one would hang here.
  const absl::StatusOr<std::string> bytes = ReadCacheFile(fifo, false, nullptr);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bytes.status().message(), HasSubstr("not a regular file"));
}

TEST(CacheFolderTest, ReadCacheFileOfAFolderIsDataLoss) {
  ScopedTempDir dir;
  FileIdentity identity;
  absl::StatusOr<std::string> bytes = ReadCacheFile(dir.path(), false, &identity);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bytes.status().message(), HasSubstr("not a regular file"));
  EXPECT_NE(identity.inode, 0u);
}

TEST(CacheFolderTest, ReadCacheFileMarksUseOnlyWhenAsked) {
  ScopedTempDir dir;
  const std::string path = PutEntry(dir.path(), "a", 10, kLongAgo);
  ASSERT_TRUE(ReadCacheFile(path, /*mark_used=*/false, nullptr).ok());
  EXPECT_EQ(LastUse(path), kLongAgo);
  ASSERT_TRUE(ReadCacheFile(path, /*mark_used=*/true, nullptr).ok());
  EXPECT_GT(LastUse(path), absl::Now() - absl::Minutes(5));
}

TEST(CacheFolderTest, RemoveIfSameSparesAFileRenamedIntoPlaceSince) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/" + TestKey("a") + ".rke";
  WriteFile(path, "old");
  FileIdentity old_identity;
  ASSERT_TRUE(ReadCacheFile(path, false, &old_identity).ok());
  ASSERT_TRUE(WriteFileAtomically(dir.path(), path, "new").ok());
  EXPECT_FALSE(RemoveIfSame(path, old_identity));
  EXPECT_EQ(ReadFile(path), "new");
  FileIdentity new_identity;
  ASSERT_TRUE(ReadCacheFile(path, false, &new_identity).ok());
  EXPECT_TRUE(RemoveIfSame(path, new_identity));
  EXPECT_FALSE(Exists(path));
}

TEST(CacheFolderTest, ListingIsOldestFirstAndSkipsForeignFiles) {
  ScopedTempDir dir;
  PutEntry(dir.path(), "new", 10, kLongAgo + absl::Seconds(30));
  PutEntry(dir.path(), "old", 20, kLongAgo);
  PutEntry(dir.path(), "mid", 30, kLongAgo + absl::Seconds(10));
  WriteFile(dir.path() + "/README", "not ours");
  WriteFile(dir.path() + "/.tmp." + TestKey("x") + ".rke.1.2.3", "partial");
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(Keys(*listing), ElementsAre(TestKey("old"), TestKey("mid"), TestKey("new")));
  EXPECT_EQ(listing->temporaries.size(), 1u);
  int64_t bytes = 0;
  for (const CacheFile& file : listing->entries) bytes += file.bytes;
  EXPECT_EQ(listing->entry_bytes, bytes);
  EXPECT_EQ(listing->entries[0].last_use, kLongAgo);
}

TEST(CacheFolderTest, ListingAMissingFolderIsNotFound) {
  ScopedTempDir dir;
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path() + "/missing");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(listing.status().message(), HasSubstr("missing"));
}

TEST(CacheFolderTest, VerifyNamesEachBadEntryAndChangesNothing) {
  ScopedTempDir dir;
  PutEntry(dir.path(), "good", 100, kLongAgo);
  const std::string bad = PutEntry(dir.path(), "bad", 100, kLongAgo);
  testing::DamageEntry(bad, testing::Damage::kPayloadBitFlip);
  absl::StatusOr<VerifyResult> result = VerifyCacheFolder(dir.path());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->good, 1);
  ASSERT_EQ(result->bad.size(), 1u);
  EXPECT_EQ(result->bad[0].path, bad);
  EXPECT_THAT(result->bad[0].problem.message(), HasSubstr("checksum"));
  EXPECT_TRUE(Exists(bad));
}

TEST(CacheFolderTest, PruneRemovesLeastRecentlyUsedUntilUnderTheCap) {
  ScopedTempDir dir;
  const std::string a = PutEntry(dir.path(), "a", 1000, kLongAgo + absl::Seconds(3));
  const std::string b = PutEntry(dir.path(), "b", 1000, kLongAgo + absl::Seconds(1));
  const std::string c = PutEntry(dir.path(), "c", 1000, kLongAgo + absl::Seconds(2));
  const int64_t entry_bytes = static_cast<int64_t>(ReadFile(a).size());
  absl::StatusOr<PruneResult> result = PruneCacheFolder(dir.path(), 2 * entry_bytes, absl::Now());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->removed_entries, 1);
  EXPECT_EQ(result->kept_entries, 2);
  EXPECT_EQ(result->kept_bytes, 2 * entry_bytes);
  EXPECT_FALSE(Exists(b));
  EXPECT_TRUE(Exists(a));
  EXPECT_TRUE(Exists(c));

  result = PruneCacheFolder(dir.path(), entry_bytes + 1, absl::Now());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(Exists(c));
  EXPECT_TRUE(Exists(a));
}

TEST(CacheFolderTest, PruneRemovesStaleTemporariesAndFoldersInEntriesPlaces) {
  ScopedTempDir dir;
  const std::string stale = dir.path() + "/.tmp.stale";
  const std::string fresh = dir.path() + "/.tmp.fresh";
  WriteFile(stale, "x");
  WriteFile(fresh, "x");
  const absl::Time now = absl::Now();
  SetLastUse(stale, now - kStaleTemporaryAge - absl::Minutes(1));
  const std::string folder = dir.path() + "/" + TestKey("f") + ".rke";
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  absl::StatusOr<PruneResult> result = PruneCacheFolder(dir.path(), int64_t{1} << 30, now);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->removed_temporaries, 1);
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(fresh));
  EXPECT_FALSE(Exists(folder));
}

TEST(CacheFolderTest, ClearRemovesEntriesAndTemporariesOnly) {
  ScopedTempDir dir;
  PutEntry(dir.path(), "a", 10, kLongAgo);
  PutEntry(dir.path(), "b", 10, kLongAgo);
  WriteFile(dir.path() + "/.tmp.partial", "x");
  WriteFile(dir.path() + "/notes.txt", "keep me");
  absl::StatusOr<PruneResult> result = ClearCacheFolder(dir.path());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->removed_entries, 2);
  EXPECT_EQ(result->removed_temporaries, 1);
  EXPECT_TRUE(Exists(dir.path() + "/notes.txt"));
  absl::StatusOr<CacheListing> listing = ListCacheFolder(dir.path());
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(listing->entries, IsEmpty());
  EXPECT_THAT(listing->temporaries, IsEmpty());
}

}  // namespace
}  // namespace reprise::runtime
