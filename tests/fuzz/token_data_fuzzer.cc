// libFuzzer target: the token data path (reprise/data.h) on arbitrary shard files and loader
// options, against a model of what it documents. TokenShard::Open accepts exactly the files
// whose header and size agree; Read gives the file's tokens or names a bad one; TokenLoader gives
// epoch after epoch of windows in EpochOrder's order, B to a batch, and ends at the first batch
// holding a bad token with an error that every later call repeats; SequentialTokenReader gives the
// windows in file order. Never a crash, a hang, an exception or undefined behaviour.
//
// Input: 8 bytes of settings (which form, vocabulary, B, T, prefetch, first batch, seed), then the
// shards' bytes. Raw form: one or two files of the given bytes (split at a 16-bit length), header
// included. Written form: the bytes are tokens, written with WriteTokenShard.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "reprise/data.h"
#include "src/data/token_shard.h"

namespace {

using reprise::data::kTokenShardHeaderBytes;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// The folder the shards are written to, made once per process and removed at its exit (each
// input unlinks its files).
class TempFolder {
 public:
  TempFolder() : path_("/tmp/reprise_token_fuzz.XXXXXX") {
    Check(::mkdtemp(path_.data()) != nullptr);
  }
  ~TempFolder() { ::rmdir(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& Folder() {
  static const TempFolder folder;
  return folder.path();
}

void WriteRaw(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  Check(f != nullptr);
  Check(size == 0 || std::fwrite(data, 1, size, f) == size);
  Check(std::fclose(f) == 0);
}

// What Open must make of a file's bytes: its tokens where the header and size agree, else none.
struct Expected {
  bool opens = false;
  std::vector<uint16_t> tokens;
};

Expected Model(const uint8_t* data, size_t size) {
  Expected e;
  if (size < static_cast<size_t>(kTokenShardHeaderBytes)) return e;
  int32_t header[3];
  std::memcpy(header, data, sizeof(header));
  if (header[0] != reprise::data::kTokenShardMagic) return e;
  if (header[1] != reprise::data::kTokenShardVersion || header[2] < 0) return e;
  if (static_cast<int64_t>(size) != kTokenShardHeaderBytes + 2 * int64_t{header[2]}) return e;
  e.opens = true;
  e.tokens.resize(static_cast<size_t>(header[2]));
  if (!e.tokens.empty()) {
    std::memcpy(e.tokens.data(), data + kTokenShardHeaderBytes, 2 * e.tokens.size());
  }
  return e;
}

bool AllBelow(const uint16_t* tokens, size_t n, int vocab) {
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= vocab) return false;
  }
  return true;
}

// The global windows of the shards, as the loader's documentation numbers them: window w of a
// shard of N tokens covers tokens [w T, w T + T], floor((N - 1) / T) of them, shard after shard.
std::vector<const uint16_t*> Windows(const std::vector<Expected>& shards, int t) {
  std::vector<const uint16_t*> windows;
  for (const Expected& s : shards) {
    const size_t n = (s.tokens.size() - 1) / static_cast<size_t>(t);
    for (size_t w = 0; w < n; ++w) windows.push_back(s.tokens.data() + w * t);
  }
  return windows;
}

// Whether `inputs`/`targets` (B x T) hold exactly the given windows.
bool Holds(const std::vector<const uint16_t*>& batch, int t, const std::vector<int32_t>& inputs,
           const std::vector<int32_t>& targets) {
  for (size_t b = 0; b < batch.size(); ++b) {
    for (int i = 0; i < t; ++i) {
      if (inputs[b * t + i] != batch[b][i] || targets[b * t + i] != batch[b][i + 1]) return false;
    }
  }
  return true;
}

bool BatchIsClean(const std::vector<const uint16_t*>& batch, int t, int vocab) {
  for (const uint16_t* w : batch) {
    if (!AllBelow(w, static_cast<size_t>(t) + 1, vocab)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const bool written = (data[0] & 1) != 0, two = (data[0] & 2) != 0;
  const bool check_all = (data[0] & 4) != 0;
  const int vocab = 1 + (data[1] | (data[2] & 0xff) << 8);  // 1 to 65536.
  const int b = 1 + data[3] % 4, t = 1 + data[4] % 16, prefetch = 1 + data[5] % 3;
  const int64_t first_batch = data[6] % 16;
  const uint64_t seed = data[7];
  data += 8;
  size -= 8;

  // The shards' files and what each must read as.
  std::vector<std::pair<const uint8_t*, size_t>> parts;
  if (two && size >= 2) {
    const size_t first = std::min<size_t>(size - 2, data[0] | data[1] << 8);
    parts = {{data + 2, first}, {data + 2 + first, size - 2 - first}};
  } else {
    parts = {{data, size}};
  }
  std::vector<std::string> paths;
  std::vector<Expected> expected;
  for (const auto& [bytes, n] : parts) {
    const std::string path = Folder() + "/shard" + std::to_string(paths.size()) + ".bin";
    Expected e;
    if (written) {
      e.opens = true;
      e.tokens.resize(n / 2);
      if (!e.tokens.empty()) std::memcpy(e.tokens.data(), bytes, 2 * e.tokens.size());
      Check(reprise::data::WriteTokenShard(path, e.tokens).ok());
    } else {
      WriteRaw(path, bytes, n);
      e = Model(bytes, n);
    }
    paths.push_back(path);
    expected.push_back(std::move(e));
  }

  // Each shard alone: opens exactly when the model says, reads its tokens or names a bad one.
  bool all_open = true, all_clean = true, all_long = true;
  for (size_t i = 0; i < paths.size(); ++i) {
    absl::StatusOr<reprise::data::TokenShard> shard =
        reprise::data::TokenShard::Open(paths[i], vocab);
    Check(shard.ok() == expected[i].opens);
    if (!shard.ok()) {
      Check(shard.status().message().find(paths[i]) != std::string::npos);
      all_open = false;
      continue;
    }
    const std::vector<uint16_t>& tokens = expected[i].tokens;
    Check(shard->num_tokens() == static_cast<int64_t>(tokens.size()));
    const bool clean = AllBelow(tokens.data(), tokens.size(), vocab);
    all_clean = all_clean && clean;
    all_long = all_long && tokens.size() >= static_cast<size_t>(t) + 1;
    Check(shard->CheckAllTokens().ok() == clean);
    std::vector<uint16_t> read(tokens.size());
    const absl::Status status = shard->Read(0, absl::MakeSpan(read));
    Check(status.ok() == clean);
    if (clean) Check(read == tokens);
    std::vector<uint16_t> one(1);
    Check(!shard->Read(static_cast<int64_t>(tokens.size()), absl::MakeSpan(one)).ok());
    Check(!shard->Read(-1, absl::MakeSpan(one)).ok());
  }

  reprise::data::TokenLoaderOptions options;
  options.shards = paths;
  options.batch_size = b;
  options.sequence_length = t;
  options.vocab_size = vocab;
  options.seed = seed;
  options.prefetch = prefetch;
  options.first_batch = first_batch;
  options.check_all_tokens = check_all;
  const bool loads = all_open && all_long && (!check_all || all_clean);
  // Every shard opened and holds a window where `loads`.
  const std::vector<const uint16_t*> windows =
      loads ? Windows(expected, t) : std::vector<const uint16_t*>();
  std::vector<int32_t> inputs(static_cast<size_t>(b) * t), targets(inputs.size());

  // The shuffled loader: batch k holds global positions k B ... k B + B - 1 of the epochs' orders.
  auto loader = reprise::data::TokenLoader::Create(options);
  Check(loader.ok() == loads);
  if (loader.ok()) {
    const int64_t n = static_cast<int64_t>(windows.size());
    Check((*loader)->windows_per_epoch() == n);
    bool failed = false;
    for (int64_t k = first_batch; k < first_batch + 3; ++k) {
      std::vector<const uint16_t*> batch;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t position = k * b + i;
        batch.push_back(windows[reprise::data::EpochOrder(n, seed, position / n)[position % n]]);
      }
      const absl::Status status = (*loader)->Next(absl::MakeSpan(inputs), absl::MakeSpan(targets));
      failed = failed || !BatchIsClean(batch, t, vocab);
      Check(status.ok() == !failed);
      if (status.ok()) Check(Holds(batch, t, inputs, targets));
    }
  }

  // The sequential reader: the windows in file order, the leftovers of the last batch unread,
  // OutOfRange after the last batch until Rewind; refused where no whole batch is there.
  auto reader = reprise::data::SequentialTokenReader::Create(options);
  Check(reader.ok() == (loads && static_cast<int64_t>(windows.size()) >= b));
  if (reader.ok()) {
    const int64_t batches = static_cast<int64_t>(windows.size()) / b;
    Check((*reader)->num_batches() == batches);
    auto batch_of = [&](int64_t k) {
      return std::vector<const uint16_t*>(windows.begin() + k * b, windows.begin() + (k + 1) * b);
    };
    bool clean = true;
    for (int64_t k = 0; clean && k < std::min<int64_t>(batches, 4); ++k) {
      const absl::Status status = (*reader)->Next(absl::MakeSpan(inputs), absl::MakeSpan(targets));
      clean = BatchIsClean(batch_of(k), t, vocab);
      Check(status.ok() == clean);
      if (clean) Check(Holds(batch_of(k), t, inputs, targets));
    }
    if (clean && batches <= 4) {
      Check(absl::IsOutOfRange((*reader)->Next(absl::MakeSpan(inputs), absl::MakeSpan(targets))));
      (*reader)->Rewind();
      if (batches > 0) {
        Check((*reader)->Next(absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
        Check(Holds(batch_of(0), t, inputs, targets));
      }
    }
  }
  for (const std::string& path : paths) ::unlink(path.c_str());
  return 0;
}
