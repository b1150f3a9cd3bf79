// libFuzzer target: the kernel cache's entry decoder on arbitrary bytes (a cache folder is shared
// and may hold anything). Either a Status or a kernel that encodes back to the very same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/runtime/cache_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  reprise::runtime::CacheEntryHeader header;
  absl::StatusOr<reprise::runtime::KernelBinary> binary =
      reprise::runtime::DecodeCacheEntry(bytes, "", &header);
  if (!binary.ok()) return 0;
  if (reprise::runtime::EncodeCacheEntry(header.key, *binary) != bytes) __builtin_trap();
  // The same entry under another expected key is refused, not decoded.
  const std::string other(64, header.key[0] == 'a' ? 'b' : 'a');
  if (reprise::runtime::DecodeCacheEntry(bytes, other).ok()) __builtin_trap();
  return 0;
}
