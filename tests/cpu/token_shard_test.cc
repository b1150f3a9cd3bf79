// Token shards: a shard written byte by byte in llm.c's layout reads back; every malformed file
// (wrong magic, version or count, truncated, longer than its header, a FIFO, a directory, a
// missing file) is refused naming the file, a FIFO without blocking; a token outside the
// vocabulary is refused naming the file and its position.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/data.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::data {
namespace {

using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

MATCHER_P2(StatusIs, code, message_matcher, "") {
  return arg.code() == code && ::testing::ExplainMatchResult(
                                   message_matcher, std::string(arg.message()), result_listener);
}

// llm.c's layout spelled out independently of WriteTokenShard: 256 int32, then uint16 tokens.
std::string ShardBytes(int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(header.size() * 4 + tokens.size() * 2, '\0');
  std::memcpy(bytes.data(), header.data(), header.size() * 4);
  if (!tokens.empty()) {
    std::memcpy(bytes.data() + header.size() * 4, tokens.data(), tokens.size() * 2);
  }
  return bytes;
}

std::vector<uint16_t> Iota(int n, int modulo) {
  std::vector<uint16_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i % modulo);
  return tokens;
}

class TokenShardTest : public ::testing::Test {
 protected:
  std::string Path(absl::string_view name) const { return absl::StrCat(dir_.path(), "/", name); }
  std::string Write(absl::string_view name, const std::string& bytes) {
    std::string path = Path(name);
    WriteFile(path, bytes);
    return path;
  }
  ScopedTempDir dir_;
};

TEST_F(TokenShardTest, ReadsLlmcLayout) {
  const std::vector<uint16_t> tokens = Iota(1000, 50257);
  const std::string path = Write("a.bin", ShardBytes(20240520, 1, 1000, tokens));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, 50257);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->num_tokens(), 1000);
  EXPECT_EQ(shard->path(), path);
  std::vector<uint16_t> got(300);
  ASSERT_TRUE(shard->Read(500, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, std::vector<uint16_t>(tokens.begin() + 500, tokens.begin() + 800));
  EXPECT_TRUE(shard->CheckAllTokens().ok());
}

TEST_F(TokenShardTest, WriteTokenShardWritesLlmcLayout) {
  const std::vector<uint16_t> tokens = {50256, 0, 7, 65535, 42};
  const std::string path = Path("w.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  EXPECT_EQ(reprise::testing::ReadFile(path), ShardBytes(20240520, 1, 5, tokens));
  // No temporary file is left beside it.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

// A path that is a device, a FIFO or a directory is refused and stays what it was (the shard is
// renamed into place: as root, a write to /dev/null replaced /dev/null); a symbolic link keeps
// pointing at its target, which gets the shard.
TEST_F(TokenShardTest, WriteTokenShardReplacesOnlyRegularFiles) {
  const std::vector<uint16_t> tokens = {1, 2, 3};
  std::vector<std::pair<std::string, mode_t>> nodes = {{Path("fifo"), S_IFIFO},
                                                       {Path("folder"), S_IFDIR}};
  ASSERT_EQ(::mkfifo(nodes[0].first.c_str(), 0600), 0) << std::strerror(errno);
  std::filesystem::create_directory(nodes[1].first);
  // A character device of our own (the null device's numbers), where we may make one (root).
  if (::mknod(Path("null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0) {
    nodes.push_back({Path("null"), S_IFCHR});
  }
  for (const auto& [path, kind] : nodes) {
    EXPECT_THAT(WriteTokenShard(path, tokens),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(path), HasSubstr("not a regular file"))));
    struct stat st;
    ASSERT_EQ(::lstat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & S_IFMT, kind) << path;
  }
  const std::string target = Path("folder/shard.bin"), link = Path("latest.bin");
  ASSERT_TRUE(WriteTokenShard(target, {9}).ok());
  std::filesystem::create_symlink("folder/shard.bin", link);
  ASSERT_TRUE(WriteTokenShard(link, tokens).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(reprise::testing::ReadFile(target), ShardBytes(20240520, 1, 3, tokens));
  std::filesystem::create_symlink("absent/shard.bin", Path("dangling.bin"));
  EXPECT_THAT(WriteTokenShard(Path("dangling.bin"), tokens),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be resolved")));
}

TEST_F(TokenShardTest, EmptyShardIsValid) {
  const std::string path = Write("e.bin", ShardBytes(20240520, 1, 0, {}));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, 256);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->num_tokens(), 0);
  EXPECT_TRUE(shard->CheckAllTokens().ok());
}

TEST_F(TokenShardTest, RefusesWrongMagic) {
  const std::string path = Write("m.bin", ShardBytes(20240521, 1, 4, Iota(4, 10)));
  EXPECT_THAT(TokenShard::Open(path, 50257).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("magic 20240521"))));
}

TEST_F(TokenShardTest, RefusesWrongVersion) {
  const std::string path = Write("v.bin", ShardBytes(20240520, 2, 4, Iota(4, 10)));
  EXPECT_THAT(
      TokenShard::Open(path, 50257).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("version 2"))));
}

TEST_F(TokenShardTest, RefusesNegativeCount) {
  const std::string path = Write("n.bin", ShardBytes(20240520, 1, -3, {}));
  EXPECT_THAT(TokenShard::Open(path, 50257).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("negative token count"))));
}

TEST_F(TokenShardTest, RefusesTruncatedHeader) {
  const std::string full = ShardBytes(20240520, 1, 4, Iota(4, 10));
  for (size_t bytes : {size_t{0}, size_t{3}, size_t{12}, size_t{1023}}) {
    SCOPED_TRACE(bytes);
    const std::string path = Write(absl::StrCat("h", bytes, ".bin"), full.substr(0, bytes));
    EXPECT_THAT(TokenShard::Open(path, 50257).status(),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(path), HasSubstr("truncated"),
                               HasSubstr("shorter than the 1024-byte header"))));
  }
}

TEST_F(TokenShardTest, RefusesTruncatedBody) {
  const std::string full = ShardBytes(20240520, 1, 100, Iota(100, 10));
  // Every cut inside the body, a whole token short or half a token short.
  for (size_t cut : {size_t{1}, size_t{2}, size_t{99}, size_t{200}}) {
    SCOPED_TRACE(cut);
    const std::string path =
        Write(absl::StrCat("t", cut, ".bin"), full.substr(0, full.size() - cut));
    EXPECT_THAT(TokenShard::Open(path, 50257).status(),
                StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("truncated"),
                                                            HasSubstr("header says 100 tokens"))));
  }
}

TEST_F(TokenShardTest, RefusesSizeThatDisagreesWithHeader) {
  // Longer than the header says: a whole token more, or one stray byte.
  for (const std::string& extra : {std::string(2, '\0'), std::string(1, '\x07')}) {
    SCOPED_TRACE(extra.size());
    const std::string path = Write(absl::StrCat("x", extra.size(), ".bin"),
                                   ShardBytes(20240520, 1, 10, Iota(10, 10)) + extra);
    EXPECT_THAT(TokenShard::Open(path, 50257).status(),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(path), HasSubstr("disagrees with the header"))));
  }
}

TEST_F(TokenShardTest, RefusesFifoWithoutBlocking) {
  const std::string path = Path("fifo");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  auto opened = std::async(std::launch::async, [&] { return TokenShard::Open(path, 50257); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "Open blocked on a FIFO";
    // Release the blocked reader so that the test can end.
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_THAT(opened.get().status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("FIFO"), HasSubstr("not a regular"))));
}

TEST_F(TokenShardTest, RefusesDirectoryAndMissingFile) {
  EXPECT_THAT(TokenShard::Open(dir_.path(), 50257).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(dir_.path()), HasSubstr("directory"))));
  const std::string missing = Path("missing.bin");
  EXPECT_THAT(TokenShard::Open(missing, 50257).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(missing)));
}

TEST_F(TokenShardTest, RefusesVocabularyOutsideUint16) {
  const std::string path = Write("ok.bin", ShardBytes(20240520, 1, 4, Iota(4, 10)));
  for (int vocab : {0, -1, 65537}) {
    EXPECT_THAT(TokenShard::Open(path, vocab).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(path), HasSubstr(absl::StrCat(vocab)))));
  }
  // 65536 admits every uint16 id.
  const std::string top = Write("top.bin", ShardBytes(20240520, 1, 2, {65535, 0}));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(top, 65536);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE(shard->CheckAllTokens().ok());
}

TEST_F(TokenShardTest, RefusesTokenOutsideVocabularyNamingPosition) {
  std::vector<uint16_t> tokens = Iota(3000, 50257);
  tokens[2077] = 50257;
  const std::string path = Write("bad.bin", ShardBytes(20240520, 1, 3000, tokens));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, 50257);
  ASSERT_TRUE(shard.ok()) << shard.status();  // The header is fine; the token is found on read.
  const auto bad = AllOf(HasSubstr(path), HasSubstr("token 50257 at position 2077"),
                         HasSubstr("vocabulary of 50257"));
  EXPECT_THAT(shard->CheckAllTokens(), StatusIs(absl::StatusCode::kInvalidArgument, bad));
  std::vector<uint16_t> window(100);
  EXPECT_THAT(shard->Read(2000, absl::MakeSpan(window)),
              StatusIs(absl::StatusCode::kInvalidArgument, bad));
  // A range that misses the bad token reads fine.
  EXPECT_TRUE(shard->Read(2078, absl::MakeSpan(window)).ok());
  EXPECT_TRUE(shard->Read(1900, absl::MakeSpan(window)).ok());
}

TEST_F(TokenShardTest, ReadOutsideShardIsOutOfRange) {
  const std::string path = Write("r.bin", ShardBytes(20240520, 1, 10, Iota(10, 10)));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, 10);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<uint16_t> out(4);
  EXPECT_TRUE(shard->Read(6, absl::MakeSpan(out)).ok());
  EXPECT_THAT(shard->Read(7, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr(path)));
  EXPECT_THAT(shard->Read(-1, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr(path)));
}

TEST_F(TokenShardTest, ReadOfShardThatShrankIsDataLoss) {
  const std::string path = Write("s.bin", ShardBytes(20240520, 1, 100, Iota(100, 10)));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, 10);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ(::truncate(path.c_str(), 1024 + 2 * 50), 0);
  std::vector<uint16_t> out(20);
  EXPECT_TRUE(shard->Read(10, absl::MakeSpan(out)).ok());
  EXPECT_THAT(shard->Read(40, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("shrank"))));
}

TEST_F(TokenShardTest, MovedShardKeepsReading) {
  const std::vector<uint16_t> tokens = Iota(50, 50);
  const std::string path = Write("mv.bin", ShardBytes(20240520, 1, 50, tokens));
  absl::StatusOr<TokenShard> opened = TokenShard::Open(path, 50);
  ASSERT_TRUE(opened.ok()) << opened.status();
  TokenShard moved = std::move(*opened);
  std::vector<TokenShard> shards;
  shards.push_back(std::move(moved));
  shards.push_back(*TokenShard::Open(path, 50));  // Reallocation moves the first again.
  std::vector<uint16_t> out(50);
  for (const TokenShard& shard : shards) {
    ASSERT_TRUE(shard.Read(0, absl::MakeSpan(out)).ok());
    EXPECT_EQ(out, tokens);
  }
}

}  // namespace
}  // namespace reprise::data
