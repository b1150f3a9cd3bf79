// Loader options, windows over shards, the seeded epoch shuffle, windows into inputs/targets.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "reprise/data.h"
#include "src/data/token_shard.h"
#include "src/util/checked_math.h"
#include "src/util/splitmix64.h"
#include "src/util/status_macros.h"

namespace reprise::data {
namespace {

using util::SplitMix64;

// Uniform in [0, bound) without modulo bias: Lemire's multiply-shift with rejection.
uint64_t Bounded(uint64_t& state, uint64_t bound) {
  unsigned __int128 product = static_cast<unsigned __int128>(SplitMix64(state)) * bound;
  uint64_t low = static_cast<uint64_t>(product);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(SplitMix64(state)) * bound;
      low = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace

absl::StatusOr<std::vector<TokenShard>> OpenShardsForLoader(const TokenLoaderOptions& options,
                                                            int64_t buffers) {
  if (options.shards.empty()) return absl::InvalidArgumentError("token loader: no shards given");
  if (options.batch_size < 1 || options.sequence_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token loader: batch size %d and sequence length %d must be >= 1",
                        options.batch_size, options.sequence_length));
  }
  if (options.vocab_size < 1 || options.vocab_size > 65536) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token loader: vocabulary size %d is outside [1, 65536] (token ids are uint16)",
        options.vocab_size));
  }
  if (options.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token loader: prefetch %d must be >= 1", options.prefetch));
  }
  // B and T + 1 are below 2^31 each: their product fits, the buffers' count may not.
  const int64_t batch_tokens = int64_t{options.batch_size} * (int64_t{options.sequence_length} + 1);
  if (std::optional<int64_t> total = CheckedMul(batch_tokens, buffers);
      !total.has_value() || *total > kMaxBufferedTokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token loader: batches of %d x (%d + 1) tokens, %d of them buffered, would hold more "
        "than the %d tokens a loader buffers",
        options.batch_size, options.sequence_length, buffers, kMaxBufferedTokens));
  }
  if (options.first_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token loader: first batch %d must be >= 0", options.first_batch));
  }
  std::vector<TokenShard> shards;
  shards.reserve(options.shards.size());
  for (const std::string& path : options.shards) {
    ASSIGN_OR_RETURN(TokenShard shard, TokenShard::Open(path, options.vocab_size));
    if (shard.num_tokens() < int64_t{options.sequence_length} + 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token shard '%s' has %d tokens, fewer than one sequence of %d + 1", path,
                          shard.num_tokens(), options.sequence_length));
    }
    if (options.check_all_tokens) RETURN_IF_ERROR(shard.CheckAllTokens());
    shards.push_back(std::move(shard));
  }
  return shards;
}

WindowIndex::WindowIndex(absl::Span<const TokenShard> shards, int sequence_length)
    : sequence_length_(sequence_length) {
  for (const TokenShard& shard : shards) {
    // Window w reads tokens [w T, w T + T]; the last one needs w T + T <= N - 1.
    const int64_t windows = (shard.num_tokens() - 1) / sequence_length;
    first_.push_back(first_.back() + windows);
  }
}

std::pair<int, int64_t> WindowIndex::Locate(int64_t window) const {
  // The shard s with first_[s] <= window < first_[s + 1].
  const auto next = std::upper_bound(first_.begin(), first_.end(), window);
  const int shard = static_cast<int>(next - first_.begin()) - 1;
  return {shard, (window - first_[shard]) * sequence_length_};
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  // Seed and epoch are mixed through one SplitMix64 step each so that nearby seeds or epochs
  // start far apart in the sequence.
  uint64_t mix = seed;
  uint64_t state = SplitMix64(mix) ^ static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ull;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(Bounded(state, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

void SplitWindows(absl::Span<const uint16_t> windows, int batch_size, int sequence_length,
                  absl::Span<int32_t> inputs, absl::Span<int32_t> targets) {
  const size_t t_len = static_cast<size_t>(sequence_length);
  for (size_t b = 0; b < static_cast<size_t>(batch_size); ++b) {
    const uint16_t* window = windows.data() + b * (t_len + 1);
    int32_t* in = inputs.data() + b * t_len;
    int32_t* out = targets.data() + b * t_len;
    for (size_t t = 0; t < t_len; ++t) {
      in[t] = window[t];
      out[t] = window[t + 1];
    }
  }
}

absl::Status CheckBatchSpans(size_t inputs, size_t targets, int batch_size, int sequence_length) {
  const size_t expected = static_cast<size_t>(batch_size) * static_cast<size_t>(sequence_length);
  if (inputs != expected || targets != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token batch: inputs hold %d and targets %d values; both must hold B * T = %d * %d = %d",
        inputs, targets, batch_size, sequence_length, expected));
  }
  return absl::OkStatus();
}

}  // namespace reprise::data
