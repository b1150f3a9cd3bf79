#include "src/runtime/cache_entry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/sha256.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::runtime {
namespace {

using ::reprise::testing::TestKey;
using ::testing::HasSubstr;

KernelBinary SmallBinary() {
  return KernelBinary{.name = "k",
                      .arch = "sm_90",
                      .cubin =
                          "\x7f"
                          "ELF cubin",
                      .ptx = ".entry k"};
}

TEST(CacheEntryTest, RoundTripsEveryField) {
  const std::string key = TestKey("a");
  const std::string bytes = EncodeCacheEntry(key, SmallBinary());
  CacheEntryHeader header;
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes, key, &header);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->name, "k");
  EXPECT_EQ(decoded->arch, "sm_90");
  EXPECT_EQ(decoded->cubin, SmallBinary().cubin);
  EXPECT_EQ(decoded->ptx, ".entry k");
  EXPECT_EQ(header.version, kCacheEntryVersion);
  EXPECT_EQ(header.key, key);
  EXPECT_EQ(header.cubin_bytes, SmallBinary().cubin.size());
  EXPECT_EQ(bytes.size(), kCacheEntryHeaderBytes + 1 + 5 + SmallBinary().cubin.size() + 8 +
                              kCacheEntryChecksumBytes);
}

TEST(CacheEntryTest, EmptySectionsRoundTrip) {
  const std::string key = TestKey("empty");
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(EncodeCacheEntry(key, {}), key);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->cubin.empty());
}

TEST(CacheEntryTest, EmptyExpectedKeyAcceptsAnyKey) {
  EXPECT_TRUE(DecodeCacheEntry(EncodeCacheEntry(TestKey("a"), SmallBinary()), "").ok());
}

TEST(CacheEntryTest, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeCacheEntry(TestKey("a"), SmallBinary());
  for (size_t size = 0; size < bytes.size(); ++size) {
    absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes.substr(0, size), TestKey("a"));
    ASSERT_FALSE(decoded.ok()) << "kept " << size << " bytes";
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << "kept " << size;
  }
}

TEST(CacheEntryTest, EveryBitFlipIsCaught) {
  const std::string key = TestKey("a");
  const std::string bytes = EncodeCacheEntry(key, SmallBinary());
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::string damaged = bytes;
    damaged[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_FALSE(DecodeCacheEntry(damaged, key).ok()) << "bit " << bit;
  }
}

TEST(CacheEntryTest, TrailingBytesAreDataLoss) {
  absl::StatusOr<KernelBinary> decoded =
      DecodeCacheEntry(EncodeCacheEntry(TestKey("a"), SmallBinary()) + "x", TestKey("a"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
}

TEST(CacheEntryTest, PayloadBitFlipIsAChecksumMismatch) {
  std::string bytes = EncodeCacheEntry(TestKey("a"), SmallBinary());
  bytes[kCacheEntryHeaderBytes + 3] ^= 0x04;
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes, TestKey("a"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("checksum"));
}

TEST(CacheEntryTest, BadMagicSaysSo) {
  std::string bytes = EncodeCacheEntry(TestKey("a"), SmallBinary());
  bytes[0] = 'X';
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes, TestKey("a"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("magic"));
}

TEST(CacheEntryTest, OtherVersionIsFailedPrecondition) {
  std::string bytes = EncodeCacheEntry(TestKey("a"), SmallBinary());
  bytes[8] = static_cast<char>(kCacheEntryVersion + 1);
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes, TestKey("a"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(decoded.status().message(), HasSubstr("version"));
}

TEST(CacheEntryTest, OtherKeyIsFailedPreconditionNamingBoth) {
  absl::StatusOr<KernelBinary> decoded =
      DecodeCacheEntry(EncodeCacheEntry(TestKey("a"), SmallBinary()), TestKey("b"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(decoded.status().message(), HasSubstr(TestKey("a")));
  EXPECT_THAT(decoded.status().message(), HasSubstr(TestKey("b")));
}

// Sizes that claim more than the file holds must not be trusted, even near 2^64.
TEST(CacheEntryTest, HugeSectionSizeIsTruncationNotACrash) {
  std::string bytes = EncodeCacheEntry(TestKey("a"), SmallBinary());
  for (int i = 0; i < 8; ++i) bytes[8 + 4 + 64 + 4 + 4 + i] = '\xff';  // cubin size.
  absl::StatusOr<KernelBinary> decoded = DecodeCacheEntry(bytes, TestKey("a"));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("truncated"));
}

}  // namespace
}  // namespace reprise::runtime
