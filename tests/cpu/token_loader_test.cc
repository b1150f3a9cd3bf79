// Token loaders: targets are the inputs shifted by one; within each epoch every window of every
// shard is read once (so every token but a shard's short tail); batches follow from the seed alone
// (not from timing, prefetch depth, or where a run resumed) and differ across seeds; errors met
// by the background thread come back from Next() naming the file; destruction while the thread
// reads is clean; the validation reader goes through the windows in file order.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/data.h"
#include "src/data/token_shard.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::data {
namespace {

using ::reprise::testing::ScopedTempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

MATCHER_P2(StatusIs, code, message_matcher, "") {
  return arg.code() == code && ::testing::ExplainMatchResult(
                                   message_matcher, std::string(arg.message()), result_listener);
}

constexpr int kVocab = 65536;

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
  bool operator<(const Batch& o) const { return inputs < o.inputs; }
};

// Shards whose tokens are their own global positions (shard s, token i -> offset(s) + i), so that
// a window's first input says which shard and position it came from.
class TokenLoaderTest : public ::testing::Test {
 protected:
  std::vector<std::string> MakeShards(const std::vector<int>& sizes) {
    std::vector<std::string> paths;
    int offset = 0;
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<uint16_t> tokens(sizes[s]);
      for (int i = 0; i < sizes[s]; ++i) tokens[i] = static_cast<uint16_t>(offset + i);
      offset += sizes[s];
      paths.push_back(absl::StrCat(dir_.path(), "/shard", s, ".bin"));
      EXPECT_TRUE(WriteTokenShard(paths.back(), tokens).ok());
    }
    return paths;
  }

  static std::vector<Batch> Take(TokenLoader& loader, int batches, int b, int t) {
    std::vector<Batch> out;
    for (int i = 0; i < batches; ++i) {
      Batch batch{std::vector<int32_t>(b * t), std::vector<int32_t>(b * t)};
      absl::Status status =
          loader.Next(absl::MakeSpan(batch.inputs), absl::MakeSpan(batch.targets));
      EXPECT_TRUE(status.ok()) << status;
      out.push_back(std::move(batch));
    }
    return out;
  }

  static std::unique_ptr<TokenLoader> Loader(TokenLoaderOptions options) {
    absl::StatusOr<std::unique_ptr<TokenLoader>> loader = TokenLoader::Create(std::move(options));
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? std::move(*loader) : nullptr;
  }

  ScopedTempDir dir_;
};

TEST_F(TokenLoaderTest, TargetsAreInputsShiftedByOne) {
  const int b = 4, t = 16;
  auto loader = Loader({.shards = MakeShards({200, 131}),
                        .batch_size = b,
                        .sequence_length = t,
                        .vocab_size = kVocab,
                        .seed = 7});
  ASSERT_NE(loader, nullptr);
  for (const Batch& batch : Take(*loader, 20, b, t)) {
    for (int row = 0; row < b; ++row) {
      for (int i = 0; i < t; ++i) {
        // Tokens are consecutive within a shard: token after input i is input i + 1.
        EXPECT_EQ(batch.targets[row * t + i], batch.inputs[row * t + i] + 1);
        if (i + 1 < t) EXPECT_EQ(batch.targets[row * t + i], batch.inputs[row * t + i + 1]);
      }
    }
  }
}

TEST_F(TokenLoaderTest, EveryWindowOncePerEpoch) {
  // Shard 0: 161 tokens -> 10 windows of 16 + 1 (no tail); shard 1: 100 tokens -> 6 windows
  // over tokens 0..96, and a tail of 3 tokens (97..99) that is never read.
  const int b = 4, t = 16;
  const std::vector<int> sizes = {161, 100};
  auto loader = Loader({.shards = MakeShards(sizes),
                        .batch_size = b,
                        .sequence_length = t,
                        .vocab_size = kVocab,
                        .seed = 3});
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(loader->windows_per_epoch(), 16);
  std::vector<int> expected_starts;
  for (int w = 0; w < 10; ++w) expected_starts.push_back(w * t);
  for (int w = 0; w < 6; ++w) expected_starts.push_back(161 + w * t);
  std::vector<std::vector<int>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(loader->epoch(), epoch);
    std::vector<int> starts;
    std::set<int> inputs_seen, targets_seen;
    for (const Batch& batch : Take(*loader, 16 / b, b, t)) {
      for (int row = 0; row < b; ++row) starts.push_back(batch.inputs[row * t]);
      inputs_seen.insert(batch.inputs.begin(), batch.inputs.end());
      targets_seen.insert(batch.targets.begin(), batch.targets.end());
    }
    orders.push_back(starts);
    std::vector<int> sorted = starts;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, expected_starts) << "epoch " << epoch;
    // Every token is an input except each shard's last token of its last window and the tail.
    for (int token = 0; token < 261; ++token) {
      const bool in_shard0 = token < 161;
      const int local = in_shard0 ? token : token - 161;
      const int windows = in_shard0 ? 10 : 6;
      EXPECT_EQ(inputs_seen.count(token), local < windows * t ? 1u : 0u) << token;
      EXPECT_EQ(targets_seen.count(token), local >= 1 && local <= windows * t ? 1u : 0u) << token;
    }
  }
  EXPECT_NE(orders[0], orders[1]);  // Each epoch is shuffled anew.
  EXPECT_NE(orders[1], orders[2]);
}

TEST_F(TokenLoaderTest, BatchesStraddleEpochsKeepingEachEpochWhole) {
  // 7 windows, B = 3: batches cut across epochs; each run of 7 windows is still a permutation.
  const int b = 3, t = 10;
  auto loader = Loader({.shards = MakeShards({71}),
                        .batch_size = b,
                        .sequence_length = t,
                        .vocab_size = kVocab,
                        .seed = 11});
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(loader->windows_per_epoch(), 7);
  std::vector<int> stream;
  for (const Batch& batch : Take(*loader, 14, b, t)) {
    for (int row = 0; row < b; ++row) stream.push_back(batch.inputs[row * t] / t);
  }
  for (int epoch = 0; epoch < 6; ++epoch) {
    std::vector<int> windows(stream.begin() + epoch * 7, stream.begin() + epoch * 7 + 7);
    std::sort(windows.begin(), windows.end());
    EXPECT_EQ(windows, (std::vector<int>{0, 1, 2, 3, 4, 5, 6})) << "epoch " << epoch;
  }
}

TEST_F(TokenLoaderTest, DeterministicFromSeedAlone) {
  const int b = 2, t = 8;
  const std::vector<std::string> shards = MakeShards({300, 77, 150});
  TokenLoaderOptions options{
      .shards = shards, .batch_size = b, .sequence_length = t, .vocab_size = kVocab, .seed = 1234};
  auto first = Loader(options);
  options.prefetch = 5;
  auto deeper = Loader(options);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(deeper, nullptr);
  const std::vector<Batch> a = Take(*first, 60, b, t);
  EXPECT_EQ(a, Take(*deeper, 60, b, t));
  // Resuming at batch 25 gives batches 25.. of the full run.
  options.first_batch = 25;
  options.prefetch = 1;
  auto resumed = Loader(options);
  ASSERT_NE(resumed, nullptr);
  EXPECT_EQ(resumed->next_batch(), 25);
  EXPECT_EQ(std::vector<Batch>(a.begin() + 25, a.end()), Take(*resumed, 35, b, t));
  // Another seed, another order.
  options.first_batch = 0;
  options.seed = 1235;
  auto other = Loader(options);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(a, Take(*other, 60, b, t));
}

TEST_F(TokenLoaderTest, EpochOrderIsAPermutationFixedBySeedAndEpoch) {
  const std::vector<int64_t> order = EpochOrder(1000, 42, 0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(order, EpochOrder(1000, 42, 0));
  EXPECT_NE(order, EpochOrder(1000, 43, 0));
  EXPECT_NE(order, EpochOrder(1000, 42, 1));
  EXPECT_EQ(EpochOrder(1, 42, 5), std::vector<int64_t>{0});
  // Unbiased: over many seeds each of the 24 orders of 4 windows comes about equally often
  // (expected 1000 each; a biased draw such as a plain modulo or a naive swap shows at once).
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 24000; ++seed) ++counts[EpochOrder(4, seed, 3)];
  EXPECT_EQ(counts.size(), 24u);
  for (const auto& [order4, count] : counts) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
  EXPECT_TRUE(EpochOrder(0, 42, 0).empty());
}

// The orders themselves, pinned: tools/bench/torch_gpt2_train.py writes the shuffle again in
// Python to read a train_gpt2 run's batches and pins the same values in its self-test.
TEST_F(TokenLoaderTest, EpochOrderPinnedValues) {
  EXPECT_EQ(EpochOrder(10, 1337, 0), (std::vector<int64_t>{8, 9, 6, 0, 7, 4, 2, 5, 3, 1}));
  EXPECT_EQ(EpochOrder(10, 1337, 1), (std::vector<int64_t>{3, 9, 4, 5, 6, 0, 7, 1, 2, 8}));
  EXPECT_EQ(EpochOrder(7, 0, 3), (std::vector<int64_t>{4, 0, 2, 5, 3, 6, 1}));
}

TEST_F(TokenLoaderTest, WrongSpanSizesConsumeNothing) {
  const int b = 2, t = 8;
  auto loader = Loader({.shards = MakeShards({100}),
                        .batch_size = b,
                        .sequence_length = t,
                        .vocab_size = kVocab,
                        .seed = 1});
  ASSERT_NE(loader, nullptr);
  std::vector<int32_t> small(b * t - 1), right(b * t);
  EXPECT_THAT(loader->Next(absl::MakeSpan(small), absl::MakeSpan(right)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("B * T = 2 * 8 = 16")));
  EXPECT_THAT(loader->Next(absl::MakeSpan(right), absl::MakeSpan(small)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("targets 15")));
  EXPECT_EQ(loader->next_batch(), 0);
  std::vector<int32_t> targets(b * t);
  EXPECT_TRUE(loader->Next(absl::MakeSpan(right), absl::MakeSpan(targets)).ok());
  EXPECT_EQ(loader->next_batch(), 1);
}

TEST_F(TokenLoaderTest, RefusesBadOptionsAndShortShards) {
  const std::vector<std::string> shards = MakeShards({100, 8});
  const TokenLoaderOptions good{
      .shards = {shards[0]}, .batch_size = 2, .sequence_length = 8, .vocab_size = kVocab};
  ASSERT_TRUE(TokenLoader::Create(good).ok());
  auto refused = [&](TokenLoaderOptions options, absl::string_view what) {
    EXPECT_THAT(TokenLoader::Create(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
    EXPECT_THAT(SequentialTokenReader::Create(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  TokenLoaderOptions o = good;
  o.shards.clear();
  refused(o, "no shards");
  o = good;
  o.batch_size = 0;
  refused(o, "batch size 0");
  o = good;
  o.sequence_length = -1;
  refused(o, "sequence length -1");
  o = good;
  o.vocab_size = 70000;
  refused(o, "vocabulary size 70000");
  o = good;
  o.prefetch = 0;
  EXPECT_THAT(TokenLoader::Create(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prefetch 0")));
  o = good;
  o.batch_size = 1 << 30;  // 2 buffers of 2^30 x 9 tokens: 18 GiB.
  refused(o, "more than the 2147483648 tokens a loader buffers");
  o = good;
  o.sequence_length = std::numeric_limits<int>::max();  // T + 1 overflows an int.
  refused(o, "batches of 2 x (2147483647 + 1) tokens");
  o = good;
  o.batch_size = 1 << 27;  // One buffer of 2^27 x 9 tokens fits; two don't.
  EXPECT_THAT(TokenLoader::Create(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x (8 + 1) tokens, 2 of them buffered")));
  o = good;
  o.shards.push_back(shards[1]);  // 8 tokens: not one window of 8 + 1.
  refused(o, absl::StrCat("token shard '", shards[1], "' has 8 tokens"));
  o = good;
  o.shards.push_back(absl::StrCat(dir_.path(), "/nope.bin"));
  EXPECT_THAT(TokenLoader::Create(o).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.bin")));
}

TEST_F(TokenLoaderTest, BadTokenSurfacesFromNextNamingFileAndPosition) {
  std::vector<std::string> shards = MakeShards({400});
  std::vector<uint16_t> tokens(400);
  for (int i = 0; i < 400; ++i) tokens[i] = static_cast<uint16_t>(i % 1000);
  tokens[237] = 5000;
  ASSERT_TRUE(WriteTokenShard(shards[0], tokens).ok());
  TokenLoaderOptions options{
      .shards = shards, .batch_size = 1, .sequence_length = 10, .vocab_size = 1000, .seed = 5};
  const auto bad = AllOf(HasSubstr(shards[0]), HasSubstr("token 5000 at position 237"));
  // Checked up front when asked to.
  options.check_all_tokens = true;
  EXPECT_THAT(TokenLoader::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, bad));
  // Otherwise the thread meets it: the windows before it arrive, then the error, then always it.
  options.check_all_tokens = false;
  auto loader = Loader(options);
  ASSERT_NE(loader, nullptr);
  std::vector<int32_t> in(10), out(10);
  absl::Status status;
  int good_batches = 0;
  for (int i = 0; i < 200 && status.ok(); ++i) {
    status = loader->Next(absl::MakeSpan(in), absl::MakeSpan(out));
    if (status.ok()) {
      ++good_batches;
      for (int32_t token : in) EXPECT_LT(token, 1000);
    }
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, bad));
  EXPECT_LT(good_batches, 39);  // 39 windows per epoch; the bad one comes within the first.
  EXPECT_THAT(loader->Next(absl::MakeSpan(in), absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument, bad));
  EXPECT_EQ(loader->next_batch(), good_batches);
}

TEST_F(TokenLoaderTest, ShardThatShrinksSurfacesFromNext) {
  const std::vector<std::string> shards = MakeShards({2000});
  auto loader = Loader({.shards = shards,
                        .batch_size = 4,
                        .sequence_length = 16,
                        .vocab_size = kVocab,
                        .seed = 9,
                        .prefetch = 1});
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(::truncate(shards[0].c_str(), 1024 + 2 * 100), 0);
  std::vector<int32_t> in(64), out(64);
  absl::Status status;
  for (int i = 0; i < 200 && status.ok(); ++i) {
    status = loader->Next(absl::MakeSpan(in), absl::MakeSpan(out));
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(HasSubstr(shards[0]), HasSubstr("shrank"))));
}

TEST_F(TokenLoaderTest, DestructionWhileReadingIsClean) {
  const std::vector<std::string> shards = MakeShards({60000, 5000});
  for (int round = 0; round < 20; ++round) {
    auto loader = Loader({.shards = shards,
                          .batch_size = 32,
                          .sequence_length = 256,
                          .vocab_size = kVocab,
                          .seed = static_cast<uint64_t>(round),
                          .prefetch = 4});
    ASSERT_NE(loader, nullptr);
    if (round % 2 == 1) Take(*loader, round % 5, 32, 256);
    // Destroyed here, the thread mid-read or waiting for room.
  }
}

TEST_F(TokenLoaderTest, ConcurrentCallersShareOneStream) {
  const int b = 2, t = 8;
  const std::vector<std::string> shards = MakeShards({500});
  const TokenLoaderOptions options{
      .shards = shards, .batch_size = b, .sequence_length = t, .vocab_size = kVocab, .seed = 77};
  auto single = Loader(options);
  auto shared = Loader(options);
  ASSERT_NE(single, nullptr);
  ASSERT_NE(shared, nullptr);
  std::vector<Batch> expected = Take(*single, 200, b, t);
  std::vector<Batch> got[2];
  std::thread workers[2];
  for (int w = 0; w < 2; ++w) {
    workers[w] = std::thread([&, w] { got[w] = Take(*shared, 100, b, t); });
  }
  for (std::thread& worker : workers) worker.join();
  std::vector<Batch> all = got[0];
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(shared->next_batch(), 200);
}

TEST_F(TokenLoaderTest, SequentialReaderGoesInFileOrder) {
  const int b = 3, t = 10;
  // Windows: shard 0 (51 tokens) 5, shard 1 (45 tokens) 4: 9 windows, 3 batches.
  const std::vector<std::string> shards = MakeShards({51, 45});
  absl::StatusOr<std::unique_ptr<SequentialTokenReader>> reader = SequentialTokenReader::Create(
      {.shards = shards, .batch_size = b, .sequence_length = t, .vocab_size = kVocab});
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->num_batches(), 3);
  const std::vector<int> starts = {0, 10, 20, 30, 40, 51, 61, 71, 81};
  std::vector<int32_t> in(b * t), out(b * t), first_in;
  for (int batch = 0; batch < 3; ++batch) {
    ASSERT_TRUE((*reader)->Next(absl::MakeSpan(in), absl::MakeSpan(out)).ok());
    if (batch == 0) first_in = in;
    for (int row = 0; row < b; ++row) {
      for (int i = 0; i < t; ++i) {
        EXPECT_EQ(in[row * t + i], starts[batch * b + row] + i);
        EXPECT_EQ(out[row * t + i], starts[batch * b + row] + i + 1);
      }
    }
  }
  EXPECT_THAT((*reader)->Next(absl::MakeSpan(in), absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("3 batches")));
  (*reader)->Rewind();
  ASSERT_TRUE((*reader)->Next(absl::MakeSpan(in), absl::MakeSpan(out)).ok());
  EXPECT_EQ(in, first_in);
  // Fewer windows than one batch is refused.
  EXPECT_THAT(SequentialTokenReader::Create(
                  {.shards = shards, .batch_size = 10, .sequence_length = t, .vocab_size = kVocab})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fewer than one batch")));
}

}  // namespace
}  // namespace reprise::data
