// TokenShard: open and validate an llm.c token shard, read token ranges with pread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "reprise/data.h"
#include "src/util/file_target.h"
#include "src/util/status_macros.h"

namespace reprise::data {
namespace {

// The format is little-endian and tokens are read straight into uint16_t.
static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

constexpr int64_t kMaxVocabulary = 65536;  // uint16 ids.
constexpr int64_t kCheckChunkTokens = int64_t{1} << 20;

std::string Quoted(const std::string& path) { return absl::StrCat("token shard '", path, "'"); }

absl::Status ErrnoStatus(int error, const std::string& path, absl::string_view what) {
  std::string message = absl::StrCat(Quoted(path), ": ", what, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

// Reads exactly `bytes` at `offset`, or says how many it got before the end of the file.
absl::StatusOr<size_t> PreadFully(int fd, void* out, size_t bytes, off_t offset,
                                  const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t got = ::pread(fd, static_cast<char*>(out) + done, bytes - done,
                          offset + static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, absl::StrCat("read at byte ", offset + done));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

absl::Status WriteFully(int fd, const void* data, size_t bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t wrote = ::write(fd, static_cast<const char*>(data) + done, bytes - done);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "write");
    }
    done += static_cast<size_t>(wrote);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenShard> TokenShard::Open(const std::string& path, int vocab_size) {
  if (vocab_size < 1 || vocab_size > kMaxVocabulary) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: vocabulary size %d is outside [1, %d] (token ids are uint16)",
                        Quoted(path), vocab_size, kMaxVocabulary));
  }
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. fstat on
  // the descriptor (not stat on the name) so the checked file is the one read.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, path, "cannot open");
  TokenShard shard(path, fd, 0, vocab_size);  // Owns fd from here: closed on every return.

  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, path, "fstat");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(path), " is ", FileKindName(st.st_mode), ", not a regular file"));
  }
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kTokenShardHeaderBytes) {
    return absl::DataLossError(
        absl::StrFormat("%s is truncated: %d bytes, shorter than the %d-byte header", Quoted(path),
                        file_bytes, kTokenShardHeaderBytes));
  }
  int32_t header[kTokenShardHeaderInts];
  ASSIGN_OR_RETURN(size_t got, PreadFully(fd, header, sizeof(header), 0, path));
  if (got != sizeof(header)) {
    return absl::DataLossError(
        absl::StrFormat("%s is truncated: its header ended after %d bytes", Quoted(path), got));
  }
  if (header[0] != kTokenShardMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has magic %d, not %d: not an llm.c token shard", Quoted(path),
                        header[0], kTokenShardMagic));
  }
  if (header[1] != kTokenShardVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has version %d; only version %d (uint16 tokens) is read", Quoted(path),
                        header[1], kTokenShardVersion));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has a negative token count %d in its header", Quoted(path), count));
  }
  const int64_t expected_bytes = kTokenShardHeaderBytes + 2 * count;
  if (file_bytes < expected_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s is truncated: its header says %d tokens (%d bytes) but the file has %d bytes "
        "(%d whole tokens)",
        Quoted(path), count, expected_bytes, file_bytes,
        (file_bytes - kTokenShardHeaderBytes) / 2));
  }
  if (file_bytes > expected_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s has %d bytes, more than the %d that its header's %d tokens take: the size "
        "disagrees with the header",
        Quoted(path), file_bytes, expected_bytes, count));
  }
  shard.num_tokens_ = count;
  return shard;
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      num_tokens_(other.num_tokens_),
      vocab_size_(other.vocab_size_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    num_tokens_ = other.num_tokens_;
    vocab_size_ = other.vocab_size_;
  }
  return *this;
}

TokenShard::~TokenShard() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TokenShard::Read(int64_t first, absl::Span<uint16_t> out) const {
  const int64_t count = static_cast<int64_t>(out.size());
  if (first < 0 || first > num_tokens_ - count) {
    return absl::OutOfRangeError(absl::StrFormat("%s: tokens [%d, %d) are outside its %d tokens",
                                                 Quoted(path_), first, first + count, num_tokens_));
  }
  const off_t offset = kTokenShardHeaderBytes + 2 * first;
  ASSIGN_OR_RETURN(size_t got, PreadFully(fd_, out.data(), 2 * out.size(), offset, path_));
  if (got != 2 * out.size()) {
    return absl::DataLossError(absl::StrFormat(
        "%s shrank while open: it ended at byte %d, inside the %d tokens its header says",
        Quoted(path_), offset + static_cast<int64_t>(got), num_tokens_));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (out[i] >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: token %d at position %d is outside the vocabulary of %d ids",
                          Quoted(path_), out[i], first + i, vocab_size_));
    }
  }
  return absl::OkStatus();
}

absl::Status TokenShard::CheckAllTokens() const {
  std::vector<uint16_t> chunk(static_cast<size_t>(std::min(num_tokens_, kCheckChunkTokens)));
  for (int64_t first = 0; first < num_tokens_; first += kCheckChunkTokens) {
    const int64_t count = std::min(kCheckChunkTokens, num_tokens_ - first);
    RETURN_IF_ERROR(Read(first, absl::MakeSpan(chunk.data(), static_cast<size_t>(count))));
  }
  return absl::OkStatus();
}

absl::Status WriteTokenShard(const std::string& requested_path, absl::Span<const uint16_t> tokens) {
  // A device node, FIFO or directory is refused; a symbolic link's target is written.
  ASSIGN_OR_RETURN(const std::string path, ResolveWriteTarget(requested_path));
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d tokens do not fit the header's int32 count", Quoted(path), tokens.size()));
  }
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());

  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  int fd = ::mkstemp(temp.data());
  if (fd < 0) return ErrnoStatus(errno, path, "cannot create a temporary file beside it");
  absl::Status status = WriteFully(fd, header, sizeof(header), path);
  if (status.ok()) status = WriteFully(fd, tokens.data(), 2 * tokens.size(), path);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, path, "close");
  // mkstemp makes the file private (0600); a shard is data others may read.
  if (status.ok() && ::chmod(temp.c_str(), 0644) != 0) status = ErrnoStatus(errno, path, "chmod");
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, path, "rename into place");
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

}  // namespace reprise::data
