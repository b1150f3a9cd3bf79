// SHA-256 (FIPS 180-4), used to key the kernel store: a strong hash, so distinct sources never
// share a cache entry. Not constant-time; not meant for secrets.
//
//   Sha256Hasher h;
//   h.Update("ab");
//   h.Update("c");
//   std::string hex = ToHex(h.Finish());  // == ToHex(Sha256("abc"))
#ifndef REPRISE_SRC_RUNTIME_SHA256_H_
#define REPRISE_SRC_RUNTIME_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace reprise::runtime {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing of a message given in pieces.
class Sha256Hasher {
 public:
  Sha256Hasher();
  void Update(absl::string_view data);
  // Pads and returns the digest; the hasher must not be used afterwards except to Reset().
  Sha256Digest Finish();
  void Reset();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;       // Bytes waiting in buffer_.
  uint64_t total_bytes_ = 0;  // Message length so far.
};

Sha256Digest Sha256(absl::string_view data);

// Lower-case hexadecimal, two characters per byte.
std::string ToHex(absl::Span<const uint8_t> bytes);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_SHA256_H_
