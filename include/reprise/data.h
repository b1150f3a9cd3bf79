// Token data for language models: llm.c's token shards, a shuffled training loader that reads on a
// background thread, and a sequential validation reader.
//
// A token shard (the format llm.c's data scripts write, so both trainers read the same files):
//   header  256 little-endian int32: [0] magic 20240520, [1] version 1, [2] token count N,
//           the rest unused;
//   body    N little-endian uint16 token ids.
// The file is exactly 1024 + 2 N bytes.
//
// Example, a GPT-2 step fed straight into the engine's pinned input buffers:
//   ASSIGN_OR_RETURN(auto loader, data::TokenLoader::Create({.shards = train_files,
//       .batch_size = 16, .sequence_length = 1024, .vocab_size = 50257, .seed = 1337}));
//   for (int step = 0; step < steps; ++step) {
//     ASSIGN_OR_RETURN(absl::Span<int32_t> tokens, trainer->InputBufferInt32("tokens"));
//     ASSIGN_OR_RETURN(absl::Span<int32_t> targets, trainer->InputBufferInt32("targets"));
//     RETURN_IF_ERROR(loader->Next(tokens, targets));  // Blocks only if the disk is behind.
//     RETURN_IF_ERROR(trainer->Step());
//   }
#ifndef REPRISE_INCLUDE_REPRISE_DATA_H_
#define REPRISE_INCLUDE_REPRISE_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace reprise::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;

// One open, validated token shard. Reads go to the file (pread), so a shard of any size costs no
// memory, and reads from several threads at once are safe. Movable, not copyable.
class TokenShard {
 public:
  // Opens `path` and checks it before anything is read: a regular file (a FIFO or a device is
  // refused without blocking), a whole header, magic 20240520, version 1, a count >= 0, and a
  // size of exactly 1024 + 2 * count bytes. `vocab_size` (1 to 65536) bounds the token ids that
  // later reads accept. NotFound for a missing file, InvalidArgument for a non-regular file, a
  // wrong magic, version or count, DataLoss for a truncated file or one longer than its header
  // says; each message names the file.
  static absl::StatusOr<TokenShard> Open(const std::string& path, int vocab_size);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int vocab_size() const { return vocab_size_; }

  // Reads tokens [first, first + out.size()) into `out` and checks each against the vocabulary.
  // OutOfRange for a range past the end; InvalidArgument naming the file and the token's position
  // (counted in tokens from the first) for an id >= vocab_size; DataLoss if the file shrank.
  absl::Status Read(int64_t first, absl::Span<uint16_t> out) const;

  // Reads the whole shard in chunks and checks every token id (Read's errors).
  absl::Status CheckAllTokens() const;

 private:
  TokenShard(std::string path, int fd, int64_t num_tokens, int vocab_size)
      : path_(std::move(path)), fd_(fd), num_tokens_(num_tokens), vocab_size_(vocab_size) {}

  std::string path_;
  int fd_ = -1;
  int64_t num_tokens_ = 0;
  int vocab_size_ = 0;
};

// Writes `tokens` as a token shard at `path` (through a temporary file beside it, renamed into
// place; a symbolic link keeps pointing at its target, which gets the new contents).
// InvalidArgument for more tokens than the int32 count holds, or a path that exists and is not a
// regular file (a device, a FIFO, a directory) or is a dangling link, naming what it is; Internal
// for an I/O failure.
absl::Status WriteTokenShard(const std::string& path, absl::Span<const uint16_t> tokens);

struct TokenLoaderOptions {
  std::vector<std::string> shards;  // Files, read in this order before any shuffling.
  int batch_size = 0;               // B sequences per batch.
  int sequence_length = 0;          // T: each sequence reads T + 1 tokens.
  int vocab_size = 0;               // Token ids must be below it (at most 65536).
  uint64_t seed = 0;                // The shuffle of every epoch follows from it.
  // Batches read ahead of the caller (2 = double buffering). At least 1, and prefetch · B ·
  // (T + 1) at most 2^31 tokens (4 GiB of buffers).
  int prefetch = 2;
  // The first batch to produce (counted over all epochs from 0), to resume a run where it left.
  int64_t first_batch = 0;
  // Scan every token of every shard in Create (a slow read of the whole corpus) rather than only
  // the tokens each batch reads. Either way no batch with a bad token reaches the caller.
  bool check_all_tokens = false;
};

// Training batches from token shards, shuffled deterministically from a seed.
//
// Windows: each shard is cut into fixed windows of T + 1 tokens that start every T tokens
// (window w covers tokens [w T, w T + T]; neighbours share one token, the last target of one is
// the first input of the next). A shard of N tokens has floor((N - 1) / T) windows; the tail
// after the last window (fewer than T tokens) is never read. Epoch e is one permutation of all
// windows of all shards, drawn from (seed, e); the loader's output is epoch 0's windows in that
// order, then epoch 1's, and so on, cut into batches of B consecutive windows (a batch can hold
// the end of one epoch and the start of the next). So within each epoch every window, and with it
// every token of a shard but its tail, is read exactly once. Batch k is the same for a given
// seed, shard list, B and T whatever the timing, the prefetch depth or first_batch.
//
// A background thread reads the next `prefetch` batches while the caller trains; Next() waits
// only if the thread has not finished the batch yet. Next() may be called from any thread (calls
// are serialised). The destructor stops the thread and waits for the read it is in.
class TokenLoader {
 public:
  // Opens and checks every shard (TokenShard::Open's errors) and the options: InvalidArgument for
  // no shards, B < 1, T < 1, a vocabulary outside [1, 65536], prefetch < 1, first_batch < 0, or
  // a shard with fewer than T + 1 tokens (naming it).
  static absl::StatusOr<std::unique_ptr<TokenLoader>> Create(TokenLoaderOptions options);
  ~TokenLoader();
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  // Writes the next batch: inputs[b * T + t] = token t of sequence b, targets[b * T + t] = token
  // t + 1 (both [B, T] row-major, int32). InvalidArgument, consuming nothing, if either span does
  // not hold B * T values. An error met by the background thread (a bad token, a file that
  // shrank) is returned by the call that would have received that batch, and by every call after.
  absl::Status Next(absl::Span<int32_t> inputs, absl::Span<int32_t> targets);

  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  // Batches returned so far, plus first_batch: the index of the batch the next call returns.
  int64_t next_batch() const;
  // The epoch the next batch starts in.
  int64_t epoch() const;
  // Tokens a batch trains on (B * T).
  int64_t tokens_per_batch() const;

 private:
  struct State;
  explicit TokenLoader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  int64_t windows_per_epoch_ = 0;
};

// Validation batches: the windows of every shard in file order, unshuffled, B per batch; the
// windows left over after the last whole batch are not read (num_batches() says how many there
// are). Reads on the calling thread. Not thread-safe; use one per thread.
class SequentialTokenReader {
 public:
  // The options and errors of TokenLoader::Create (seed, prefetch and first_batch are unused),
  // and InvalidArgument where the shards hold fewer windows than one batch.
  static absl::StatusOr<std::unique_ptr<SequentialTokenReader>> Create(TokenLoaderOptions options);

  int64_t num_batches() const { return num_batches_; }
  // Writes the next batch as TokenLoader::Next does. OutOfRange after the last batch (until
  // Rewind); InvalidArgument for wrong span sizes; a bad token's error naming file and position.
  absl::Status Next(absl::Span<int32_t> inputs, absl::Span<int32_t> targets);
  // Starts again from the first batch.
  void Rewind() { next_ = 0; }

 private:
  SequentialTokenReader() = default;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // Per shard its first window's index; then the total.
  int batch_size_ = 0;
  int sequence_length_ = 0;
  int64_t num_batches_ = 0;
  int64_t next_ = 0;
  std::vector<uint16_t> buffer_;
};

}  // namespace reprise::data

#endif  // REPRISE_INCLUDE_REPRISE_DATA_H_
