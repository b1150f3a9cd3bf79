#include "src/runtime/cache_entry.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/runtime/sha256.h"

namespace reprise::runtime {
namespace {

constexpr absl::string_view kMagic("RPRSKRN\0", 8);
constexpr size_t kKeyBytes = 64;

void PutLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t GetLittleEndian(absl::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<uint8_t>(in[offset + i])) << (8 * i);
  }
  return value;
}

}  // namespace

std::string EncodeCacheEntry(absl::string_view key, const KernelBinary& binary) {
  std::string out;
  out.reserve(kCacheEntryHeaderBytes + binary.name.size() + binary.arch.size() +
              binary.cubin.size() + binary.ptx.size() + kCacheEntryChecksumBytes);
  out.append(kMagic.data(), kMagic.size());
  PutLittleEndian(out, kCacheEntryVersion, 4);
  const absl::string_view key_field = key.substr(0, kKeyBytes);
  out.append(key_field.data(), key_field.size());
  out.append(kKeyBytes - key_field.size(), '\0');
  PutLittleEndian(out, binary.name.size(), 4);
  PutLittleEndian(out, binary.arch.size(), 4);
  PutLittleEndian(out, binary.cubin.size(), 8);
  PutLittleEndian(out, binary.ptx.size(), 8);
  out.append(binary.name);
  out.append(binary.arch);
  out.append(binary.cubin);
  out.append(binary.ptx);
  const Sha256Digest digest = Sha256(out);
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return out;
}

absl::StatusOr<KernelBinary> DecodeCacheEntry(absl::string_view bytes,
                                              absl::string_view expected_key,
                                              CacheEntryHeader* header_out) {
  if (bytes.size() < kCacheEntryHeaderBytes + kCacheEntryChecksumBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", bytes.size(), " bytes, shorter than an entry's header"));
  }
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::DataLossError("not a reprise kernel cache entry (bad magic)");
  }
  CacheEntryHeader header;
  size_t offset = kMagic.size();
  header.version = static_cast<uint32_t>(GetLittleEndian(bytes, offset, 4));
  offset += 4;
  // Checked before the sizes: another version may lay the rest out differently.
  if (header.version != kCacheEntryVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "format version ", header.version, ", but this build reads version ", kCacheEntryVersion));
  }
  header.key = std::string(bytes.substr(offset, kKeyBytes));
  offset += kKeyBytes;
  header.name_bytes = static_cast<uint32_t>(GetLittleEndian(bytes, offset, 4));
  offset += 4;
  header.arch_bytes = static_cast<uint32_t>(GetLittleEndian(bytes, offset, 4));
  offset += 4;
  header.cubin_bytes = GetLittleEndian(bytes, offset, 8);
  offset += 8;
  header.ptx_bytes = GetLittleEndian(bytes, offset, 8);
  offset += 8;

  // Sections are checked against what is left, one at a time, so that no sum can overflow.
  uint64_t left = bytes.size() - kCacheEntryHeaderBytes - kCacheEntryChecksumBytes;
  bool fits = true;
  for (uint64_t section : {uint64_t{header.name_bytes}, uint64_t{header.arch_bytes},
                           header.cubin_bytes, header.ptx_bytes}) {
    if (section > left) {
      fits = false;
      break;
    }
    left -= section;
  }
  if (!fits) {
    return absl::DataLossError(absl::StrCat("truncated: ", bytes.size(),
                                            " bytes, fewer than the header's section sizes need"));
  }
  if (left != 0) {
    return absl::DataLossError(
        absl::StrCat(left, " bytes more than the header's section sizes account for"));
  }
  const Sha256Digest digest = Sha256(bytes.substr(0, bytes.size() - kCacheEntryChecksumBytes));
  if (std::memcmp(digest.data(), bytes.data() + bytes.size() - kCacheEntryChecksumBytes,
                  kCacheEntryChecksumBytes) != 0) {
    return absl::DataLossError("checksum mismatch");
  }
  if (!expected_key.empty() && header.key != expected_key) {
    return absl::FailedPreconditionError(
        absl::StrCat("holds key ", header.key, ", not the key ", expected_key, " of its name"));
  }
  KernelBinary binary;
  offset = kCacheEntryHeaderBytes;
  binary.name = std::string(bytes.substr(offset, header.name_bytes));
  offset += header.name_bytes;
  binary.arch = std::string(bytes.substr(offset, header.arch_bytes));
  offset += header.arch_bytes;
  binary.cubin = std::string(bytes.substr(offset, header.cubin_bytes));
  offset += header.cubin_bytes;
  binary.ptx = std::string(bytes.substr(offset, header.ptx_bytes));
  if (header_out != nullptr) *header_out = std::move(header);
  return binary;
}

}  // namespace reprise::runtime
