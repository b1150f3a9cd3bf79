// What the token loaders share: checking their options and opening the shards, the windows that
// cut the shards into sequences, the seeded shuffle of an epoch, and splitting windows into
// inputs and targets. The public types (TokenShard, TokenLoader, ...) are in reprise/data.h.
#ifndef REPRISE_SRC_DATA_TOKEN_SHARD_H_
#define REPRISE_SRC_DATA_TOKEN_SHARD_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/data.h"

namespace reprise::data {

// Checks what TokenLoader::Create documents (sizes, vocabulary, prefetch, first_batch, the
// tokens its `buffers` batches read ahead hold) and opens every shard; a shard with fewer than
// T + 1 tokens is refused naming it. With check_all_tokens, every token of every shard is
// checked too.
absl::StatusOr<std::vector<TokenShard>> OpenShardsForLoader(const TokenLoaderOptions& options,
                                                            int64_t buffers);

// The tokens a loader's batch buffers may hold together, B (T + 1) for each (4 GiB of uint16).
inline constexpr int64_t kMaxBufferedTokens = int64_t{1} << 31;

// The fixed windows of T + 1 tokens, starting every T tokens, of a list of shards, numbered
// shard after shard: global window g is window g - first(s) of the shard s that holds it.
class WindowIndex {
 public:
  WindowIndex() = default;
  WindowIndex(absl::Span<const TokenShard> shards, int sequence_length);

  int64_t num_windows() const { return first_.back(); }
  // The shard holding window `window` (0 <= window < num_windows()) and its first token there.
  std::pair<int, int64_t> Locate(int64_t window) const;
  // Global index of shard `shard`'s first window.
  int64_t first_window(int shard) const { return first_[shard]; }

 private:
  int sequence_length_ = 0;
  std::vector<int64_t> first_ = {0};  // Prefix sums of windows per shard, one entry more.
};

// A permutation of [0, n), the same on every machine and compiler for a given (seed, epoch):
// Fisher-Yates driven by SplitMix64 with unbiased bounded draws (std::shuffle's algorithm and
// std::uniform_int_distribution are implementation-defined, so neither is used).
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

// `windows` holds B windows of T + 1 tokens back to back; writes inputs[b, t] = window b's token
// t and targets[b, t] = its token t + 1. Spans hold B * T values (the caller checked).
void SplitWindows(absl::Span<const uint16_t> windows, int batch_size, int sequence_length,
                  absl::Span<int32_t> inputs, absl::Span<int32_t> targets);

// InvalidArgument unless both spans hold B * T values, naming which and the expected size.
absl::Status CheckBatchSpans(size_t inputs, size_t targets, int batch_size, int sequence_length);

}  // namespace reprise::data

#endif  // REPRISE_SRC_DATA_TOKEN_SHARD_H_
