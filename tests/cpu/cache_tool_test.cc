#include "src/tools/cache_tool.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/cache_entry.h"
#include "src/runtime/cache_folder.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::tools {
namespace {

using ::reprise::testing::Damage;
using ::reprise::testing::DamageEntry;
using ::reprise::testing::Exists;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::SetLastUse;
using ::reprise::testing::TestKey;
using ::reprise::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

const absl::Time kLongAgo = absl::FromUnixSeconds(1'600'000'000);

CacheToolResult RunTool(std::vector<std::string> args, runtime::CacheEnvironment env = {}) {
  return RunCacheTool(args, env, absl::Now());
}

class CacheToolTest : public ::testing::Test {
 protected:
  // Two entries of kernels "alpha" (older) and "beta".
  void SetUp() override {
    int i = 0;
    for (const char* name : {"alpha", "beta"}) {
      const std::string path = runtime::CacheEntryPath(dir_.path(), TestKey(name));
      WriteFile(path, runtime::EncodeCacheEntry(TestKey(name), {.name = name,
                                                                .arch = "sm_90",
                                                                .cubin = std::string(1000, 'c'),
                                                                .ptx = "ptx"}));
      SetLastUse(path, kLongAgo + absl::Seconds(i++));
      entry_bytes_ = static_cast<int64_t>(testing::ReadFile(path).size());
      total_bytes_ += entry_bytes_;
    }
  }
  std::string Path(const char* name) const {
    return runtime::CacheEntryPath(dir_.path(), TestKey(name));
  }

  ScopedTempDir dir_;
  int64_t entry_bytes_ = 0;  // Of the newer entry, "beta".
  int64_t total_bytes_ = 0;
};

TEST_F(CacheToolTest, StatsShowsFolderEntriesBytesAndCap) {
  CacheToolResult result = RunTool({"--dir", dir_.path(), "stats"}, {.max_bytes = "64M"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr(dir_.path()));
  EXPECT_THAT(result.out, HasSubstr("entries          2"));
  EXPECT_THAT(result.out, HasSubstr(absl::StrCat("bytes            ", total_bytes_)));
  EXPECT_THAT(result.out, HasSubstr("67108864 (64.0 MiB)"));
  EXPECT_THAT(result.err, IsEmpty());
}

TEST_F(CacheToolTest, FolderComesFromTheEnvironmentWithoutDir) {
  CacheToolResult result = RunTool({"stats"}, {.cache_dir = dir_.path()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr(dir_.path()));
}

TEST_F(CacheToolTest, ListShowsKeyKernelArchSizesAndLastUse) {
  CacheToolResult result = RunTool({"list", "--dir=" + dir_.path()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr(TestKey("alpha")));
  EXPECT_THAT(result.out, HasSubstr("alpha"));
  EXPECT_THAT(result.out, HasSubstr("sm_90"));
  EXPECT_THAT(result.out, HasSubstr("1000"));
  EXPECT_THAT(result.out, HasSubstr("2020-09-13 12:26:40"));  // kLongAgo in UTC.
  EXPECT_LT(result.out.find("alpha"), result.out.find("beta")) << "oldest first";
}

TEST_F(CacheToolTest, VerifyPassesAGoodFolder) {
  CacheToolResult result = RunTool({"--dir", dir_.path(), "verify"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("2 entries ok, 0 bad"));
}

TEST_F(CacheToolTest, VerifyFailsNamingEachBadEntry) {
  DamageEntry(Path("beta"), Damage::kPayloadBitFlip);
  CacheToolResult result = RunTool({"--dir", dir_.path(), "verify"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out, HasSubstr("BAD " + Path("beta") + ": checksum mismatch"));
  EXPECT_THAT(result.out, Not(HasSubstr("BAD " + Path("alpha"))));
  EXPECT_THAT(result.err, HasSubstr("1 bad entries"));
  EXPECT_TRUE(Exists(Path("beta"))) << "verify changes nothing";
}

TEST_F(CacheToolTest, ListMarksBadEntries) {
  DamageEntry(Path("alpha"), Damage::kTruncated);
  CacheToolResult result = RunTool({"--dir", dir_.path(), "list"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("BAD: truncated"));
}

TEST_F(CacheToolTest, PruneRemovesLeastRecentlyUsedToTheGivenSize) {
  CacheToolResult result =
      RunTool({"--dir", dir_.path(), "prune", "--max-size", absl::StrCat(entry_bytes_)});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("removed 1 entries"));
  EXPECT_FALSE(Exists(Path("alpha")));
  EXPECT_TRUE(Exists(Path("beta")));
}

TEST_F(CacheToolTest, PruneDefaultsToTheConfiguredCap) {
  CacheToolResult result = RunTool({"--dir", dir_.path(), "prune"}, {.max_bytes = "1"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_FALSE(Exists(Path("alpha")));
  EXPECT_FALSE(Exists(Path("beta")));
}

TEST_F(CacheToolTest, ClearRemovesEverythingAndIsIdempotent) {
  CacheToolResult result = RunTool({"--dir", dir_.path(), "clear"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("removed 2 entries"));
  EXPECT_FALSE(Exists(Path("alpha")));
  result = RunTool({"--dir", dir_.path() + "/missing", "clear"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
}

TEST_F(CacheToolTest, HelpPrintsUsage) {
  CacheToolResult result = RunTool({"--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: reprise-cache"));
}

struct BadCall {
  std::vector<std::string> args;
  std::string message;
};

TEST_F(CacheToolTest, BadCallsFailWithAClearMessage) {
  const std::string dir = dir_.path();
  const std::vector<BadCall> calls = {
      {{}, "no command"},
      {{"--dir", dir}, "no command"},
      {{"--dir", dir, "explode"}, "unknown command 'explode'"},
      {{"--dir", dir, "stats", "list"}, "one command at a time"},
      {{"--dir", dir, "--verbose", "stats"}, "unknown flag '--verbose'"},
      {{"stats", "--dir"}, "--dir needs a value"},
      {{"stats", "--dir="}, "--dir needs a value"},
      {{"--dir", dir, "stats", "--max-size", "1M"}, "--max-size goes with prune only"},
      {{"--dir", dir, "prune", "--max-size", "lots"}, "--max-size: 'lots' is not a byte size"},
      {{"--dir", dir, "prune", "--max-size", "0"}, "is not a byte size"},
  };
  for (const BadCall& call : calls) {
    CacheToolResult result = RunTool(call.args);
    EXPECT_EQ(result.exit_code, 2) << call.message << ": a usage error";
    EXPECT_THAT(result.err, StartsWith("reprise-cache: ")) << call.message;
    EXPECT_THAT(result.err, HasSubstr(call.message));
    EXPECT_THAT(result.out, IsEmpty()) << call.message;
  }
}

// A machine that never compiled a kernel has no folder yet: an empty cache, not a failure.
TEST_F(CacheToolTest, MissingFolderIsAnEmptyCache) {
  const std::string missing = dir_.path() + "/missing";
  CacheToolResult stats = RunTool({"--dir", missing, "stats"}, {.max_bytes = "64M"});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr("folder           " + missing + " (does not exist yet)"));
  EXPECT_THAT(stats.out, HasSubstr("entries          0\n"));
  EXPECT_THAT(stats.out, HasSubstr("bytes            0 (0 B)"));
  for (const char* command : {"list", "verify", "prune"}) {
    CacheToolResult result = RunTool({"--dir", missing, command});
    EXPECT_EQ(result.exit_code, 0) << command << ": " << result.err;
    EXPECT_THAT(result.err, IsEmpty()) << command;
  }
  EXPECT_THAT(RunTool({"--dir", missing, "verify"}).out, HasSubstr("0 entries ok, 0 bad"));
  EXPECT_FALSE(Exists(missing)) << "looking creates nothing";
}

// The folder exists but cannot be read: a failure (1), not a usage error.
TEST_F(CacheToolTest, UnreadableFolderIsAFailure) {
  const std::string file = dir_.path() + "/not_a_folder";
  WriteFile(file, "x");
  CacheToolResult result = RunTool({"--dir", file, "stats"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, StartsWith("reprise-cache: "));
}

TEST_F(CacheToolTest, OffWithoutDirIsAnError) {
  CacheToolResult result = RunTool({"stats"}, {.cache_dir = "off"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("REPRISE_CACHE_DIR=off"));
  EXPECT_THAT(result.err, HasSubstr("--dir"));
}

TEST_F(CacheToolTest, BadCapInTheEnvironmentIsAnErrorWhereTheCapIsNeeded) {
  CacheToolResult result = RunTool({"--dir", dir_.path(), "stats"}, {.max_bytes = "huge"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("REPRISE_CACHE_MAX_BYTES"));
  EXPECT_EQ(RunTool({"--dir", dir_.path(), "list"}, {.max_bytes = "huge"}).exit_code, 0);
}

}  // namespace
}  // namespace reprise::tools
