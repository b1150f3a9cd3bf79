#include "src/runtime/cache_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ResolveCacheConfigTest, CacheDirVariableWins) {
  absl::StatusOr<CacheConfig> config = ResolveCacheConfig(
      {.cache_dir = "/var/cache/k", .xdg_cache_home = "/xdg", .home = "/home/u"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->enabled);
  EXPECT_EQ(config->dir, "/var/cache/k");
  EXPECT_EQ(config->max_bytes, kDefaultCacheMaxBytes);
}

TEST(ResolveCacheConfigTest, OffDisables) {
  absl::StatusOr<CacheConfig> config =
      ResolveCacheConfig({.cache_dir = "off", .xdg_cache_home = "/xdg", .home = "/home/u"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->enabled);
  EXPECT_EQ(config->dir, "");
}

TEST(ResolveCacheConfigTest, XdgCacheHomeBeforeHome) {
  absl::StatusOr<CacheConfig> config =
      ResolveCacheConfig({.xdg_cache_home = "/xdg", .home = "/home/u"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dir, "/xdg/reprise/kernels");
}

TEST(ResolveCacheConfigTest, HomeWhenXdgCacheHomeIsUnsetEmptyOrRelative) {
  for (const std::optional<std::string>& xdg :
       {std::optional<std::string>(), std::optional<std::string>(""),
        std::optional<std::string>("relative/cache")}) {
    absl::StatusOr<CacheConfig> config =
        ResolveCacheConfig({.cache_dir = "", .xdg_cache_home = xdg, .home = "/home/u"});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->dir, "/home/u/.cache/reprise/kernels") << xdg.value_or("(unset)");
  }
}

TEST(ResolveCacheConfigTest, NoFolderAtAllIsFailedPrecondition) {
  absl::StatusOr<CacheConfig> config = ResolveCacheConfig({});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(config.status().message(), HasSubstr("REPRISE_CACHE_DIR"));
}

TEST(ResolveCacheConfigTest, MaxBytesFromTheEnvironment) {
  absl::StatusOr<CacheConfig> config = ResolveCacheConfig({.cache_dir = "/c", .max_bytes = "64M"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_bytes, int64_t{64} << 20);
}

TEST(ResolveCacheConfigTest, BadMaxBytesIsInvalidArgumentNamingTheVariable) {
  absl::StatusOr<CacheConfig> config = ResolveCacheConfig({.cache_dir = "/c", .max_bytes = "lots"});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("REPRISE_CACHE_MAX_BYTES"));
  EXPECT_THAT(config.status().message(), HasSubstr("'lots'"));
}

TEST(ParseByteSizeTest, PlainAndSuffixed) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("64K"), 64 * 1024);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64 * 1024);
  EXPECT_EQ(*ParseByteSize("256M"), int64_t{256} << 20);
  EXPECT_EQ(*ParseByteSize("256MiB"), int64_t{256} << 20);
  EXPECT_EQ(*ParseByteSize("2G"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize(" 7 "), 7);
}

TEST(ParseByteSizeTest, RefusesNonsenseZeroNegativeAndOverflow) {
  for (const char* text :
       {"", "M", "0", "-5", "1.5G", "12X", "99999999999999999999", "9000000000G"}) {
    absl::StatusOr<int64_t> size = ParseByteSize(text);
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace reprise::runtime
