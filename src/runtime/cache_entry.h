// The byte layout of one on-disk kernel cache entry, and its checks. Pure: no file I/O here, so
// that every way an entry can be damaged is testable on a string.
//
// Layout (integers little-endian):
//   magic "RPRSKRN\0" (8) | format version u32 | key, 64 hex characters |
//   name size u32 | arch size u32 | cubin size u64 | ptx size u64 |
//   name | arch | cubin | ptx | SHA-256 of every byte before it (32)
// The key and the kernel's name and arch sit in the header so that a listing can show them and a
// file renamed to another key is caught.
#ifndef REPRISE_SRC_RUNTIME_CACHE_ENTRY_H_
#define REPRISE_SRC_RUNTIME_CACHE_ENTRY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/kernel_binary.h"

namespace reprise::runtime {

// Bump when the layout above changes; entries of any other version are discarded.
inline constexpr uint32_t kCacheEntryVersion = 1;
inline constexpr size_t kCacheEntryHeaderBytes = 8 + 4 + 64 + 4 + 4 + 8 + 8;
inline constexpr size_t kCacheEntryChecksumBytes = 32;

// `key` must be 64 characters (a hex SHA-256, see KernelStore::Key).
std::string EncodeCacheEntry(absl::string_view key, const KernelBinary& binary);

// The fixed-size header's fields.
struct CacheEntryHeader {
  uint32_t version = 0;
  std::string key;
  uint32_t name_bytes = 0;
  uint32_t arch_bytes = 0;
  uint64_t cubin_bytes = 0;
  uint64_t ptx_bytes = 0;
};

// Checks and decodes a whole entry. `expected_key` empty accepts any key. Errors, each with a
// message that says what is wrong: kDataLoss for a truncated or damaged entry (bad magic, sizes
// that do not add up to the entry's length, checksum mismatch); kFailedPrecondition for another
// format version or a key other than `expected_key`. `header`, if not null, is filled only for a
// good entry. The version is checked before the sizes, since another version may lay them out
// differently; the checksum before the key.
absl::StatusOr<KernelBinary> DecodeCacheEntry(absl::string_view bytes,
                                              absl::string_view expected_key,
                                              CacheEntryHeader* header = nullptr);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CACHE_ENTRY_H_
