// TokenLoader (shuffled, read ahead on a background thread) and SequentialTokenReader.
//
// The loader keeps a ring of `prefetch` slots, each B windows of T + 1 uint16 tokens. The thread
// fills batch k into slot k % prefetch while fewer than `prefetch` batches wait unread; Next()
// takes the oldest filled slot, widens it into the caller's int32 inputs and targets (so it can
// write straight into the engine's pinned input buffers), and frees the slot.
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "reprise/data.h"
#include "src/data/token_shard.h"
#include "src/util/status_macros.h"

namespace reprise::data {

struct TokenLoader::State {
  struct Slot {
    std::vector<uint16_t> tokens;  // B * (T + 1), written by the thread while not `ready`.
    absl::Status status;           // The read's outcome: an error ends the stream.
    bool ready = false;
  };

  TokenLoaderOptions options;
  std::vector<TokenShard> shards;
  WindowIndex index;

  absl::Mutex next_mu;  // Serialises Next(): one consumer at a time.
  absl::Mutex mu;
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
  int64_t produced ABSL_GUARDED_BY(mu) = 0;  // Batches filled (absolute index of the next one).
  int64_t consumed ABSL_GUARDED_BY(mu) = 0;  // Batches handed out (index of the next one).
  bool stop ABSL_GUARDED_BY(mu) = false;
  absl::Status failed ABSL_GUARDED_BY(mu);  // The first error handed out; every later call too.

  // The thread's own: the order of the epoch it is reading in.
  int64_t order_epoch = -1;
  std::vector<int64_t> order;

  std::thread thread;

  // Reads batch `k`'s windows into `tokens`.
  absl::Status Fill(int64_t k, std::vector<uint16_t>& tokens) {
    const int64_t n = index.num_windows();
    const int64_t window_tokens = int64_t{options.sequence_length} + 1;
    for (int64_t b = 0; b < options.batch_size; ++b) {
      const int64_t position = k * options.batch_size + b;
      const int64_t epoch = position / n;
      if (epoch != order_epoch) {
        order = EpochOrder(n, options.seed, epoch);
        order_epoch = epoch;
      }
      const auto [shard, first] = index.Locate(order[position % n]);
      RETURN_IF_ERROR(shards[shard].Read(
          first, absl::MakeSpan(tokens.data() + b * window_tokens, window_tokens)));
    }
    return absl::OkStatus();
  }

  void Run() {
    const int64_t prefetch = options.prefetch;
    while (true) {
      int64_t k;
      Slot* slot;
      {
        absl::MutexLock lock(&mu);
        auto room = [this, prefetch]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
          return stop || produced - consumed < prefetch;
        };
        mu.Await(absl::Condition(&room));
        if (stop) return;
        k = produced;
        slot = &slots[k % prefetch];
      }
      // The slot is free (consumed up to k - prefetch, and not yet `ready`): no one else
      // touches its tokens until it is marked ready below.
      absl::Status status = Fill(k, slot->tokens);
      absl::MutexLock lock(&mu);
      slot->status = status;
      slot->ready = true;
      produced = k + 1;
      if (!status.ok()) return;  // Nothing after a failed batch: the error ends the stream.
    }
  }
};

TokenLoader::TokenLoader(std::unique_ptr<State> state) : state_(std::move(state)) {
  windows_per_epoch_ = state_->index.num_windows();
}

absl::StatusOr<std::unique_ptr<TokenLoader>> TokenLoader::Create(TokenLoaderOptions options) {
  ASSIGN_OR_RETURN(std::vector<TokenShard> shards, OpenShardsForLoader(options, options.prefetch));
  auto state = std::make_unique<State>();
  state->index = WindowIndex(shards, options.sequence_length);
  state->shards = std::move(shards);
  state->options = std::move(options);
  const TokenLoaderOptions& o = state->options;
  {
    absl::MutexLock lock(&state->mu);
    state->slots.resize(static_cast<size_t>(o.prefetch));
    for (State::Slot& slot : state->slots) {
      slot.tokens.resize(static_cast<size_t>(o.batch_size) * (int64_t{o.sequence_length} + 1));
    }
    state->produced = state->consumed = o.first_batch;
  }
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<TokenLoader>(new TokenLoader(std::move(state)));
}

TokenLoader::~TokenLoader() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  state_->thread.join();
}

absl::Status TokenLoader::Next(absl::Span<int32_t> inputs, absl::Span<int32_t> targets) {
  State& s = *state_;
  const TokenLoaderOptions& o = s.options;
  RETURN_IF_ERROR(CheckBatchSpans(inputs.size(), targets.size(), o.batch_size, o.sequence_length));
  absl::MutexLock next_lock(&s.next_mu);
  State::Slot* slot;
  {
    absl::MutexLock lock(&s.mu);
    if (!s.failed.ok()) return s.failed;
    auto filled = [&s]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) { return s.produced > s.consumed; };
    s.mu.Await(absl::Condition(&filled));
    slot = &s.slots[s.consumed % o.prefetch];
    if (!slot->status.ok()) {
      s.failed = slot->status;
      return s.failed;
    }
  }
  // The thread leaves a ready slot alone until `consumed` passes it.
  SplitWindows(slot->tokens, o.batch_size, o.sequence_length, inputs, targets);
  absl::MutexLock lock(&s.mu);
  slot->ready = false;
  ++s.consumed;
  return absl::OkStatus();
}

int64_t TokenLoader::next_batch() const {
  absl::MutexLock lock(&state_->mu);
  return state_->consumed;
}

int64_t TokenLoader::epoch() const {
  return next_batch() * state_->options.batch_size / windows_per_epoch_;
}

int64_t TokenLoader::tokens_per_batch() const {
  return int64_t{state_->options.batch_size} * state_->options.sequence_length;
}

absl::StatusOr<std::unique_ptr<SequentialTokenReader>> SequentialTokenReader::Create(
    TokenLoaderOptions options) {
  ASSIGN_OR_RETURN(std::vector<TokenShard> shards, OpenShardsForLoader(options, 1));
  WindowIndex index(shards, options.sequence_length);
  if (index.num_windows() < options.batch_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token reader: the shards hold %d windows of %d + 1 tokens, fewer than one batch of %d",
        index.num_windows(), options.sequence_length, options.batch_size));
  }
  std::unique_ptr<SequentialTokenReader> reader(new SequentialTokenReader());
  for (size_t s = 0; s < shards.size(); ++s) {
    reader->first_window_.push_back(index.first_window(static_cast<int>(s)));
  }
  reader->first_window_.push_back(index.num_windows());
  reader->shards_ = std::move(shards);
  reader->batch_size_ = options.batch_size;
  reader->sequence_length_ = options.sequence_length;
  reader->num_batches_ = index.num_windows() / options.batch_size;
  reader->buffer_.resize(static_cast<size_t>(options.batch_size) *
                         (int64_t{options.sequence_length} + 1));
  return reader;
}

absl::Status SequentialTokenReader::Next(absl::Span<int32_t> inputs, absl::Span<int32_t> targets) {
  RETURN_IF_ERROR(CheckBatchSpans(inputs.size(), targets.size(), batch_size_, sequence_length_));
  if (next_ >= num_batches_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "token reader: all %d batches read (Rewind to read them again)", num_batches_));
  }
  const int64_t window_tokens = int64_t{sequence_length_} + 1;
  size_t shard = 0;
  for (int64_t b = 0; b < batch_size_; ++b) {
    const int64_t window = next_ * batch_size_ + b;
    while (window >= first_window_[shard + 1]) ++shard;
    const int64_t first = (window - first_window_[shard]) * sequence_length_;
    RETURN_IF_ERROR(shards_[shard].Read(
        first, absl::MakeSpan(buffer_.data() + b * window_tokens, window_tokens)));
  }
  SplitWindows(buffer_, batch_size_, sequence_length_, inputs, targets);
  ++next_;
  return absl::OkStatus();
}

}  // namespace reprise::data
