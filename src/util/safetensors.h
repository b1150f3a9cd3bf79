// safetensors: Hugging Face's tensor file format, which PyTorch reads and writes through the
// `safetensors` package. A file is an 8-byte little-endian header length N, N bytes of JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data that follows, which the tensors cover exactly once) plus an optional
// "__metadata__" object of strings, then the raw little-endian row-major tensor data.
//
// This layer moves raw bytes: it knows each dtype's size, and converts nothing.
//
//   std::vector<util::TensorView> tensors = {{"fc0.weight", kF32, {4, 3}, bytes}};
//   RETURN_IF_ERROR(util::WriteSafetensors(path, tensors, {{"format", "pt"}}));
//   ASSIGN_OR_RETURN(util::SafetensorsFile file, util::ReadSafetensors(path));
//   const util::SafetensorsEntry* w = file.Find("fc0.weight");
//   absl::string_view data = file.Data(*w);
#ifndef REPRISE_SRC_UTIL_SAFETENSORS_H_
#define REPRISE_SRC_UTIL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace reprise::util {

// The element types this reader and writer accept: safetensors' own names are "F32", "F64",
// "I32", "I64", "BF16" and "F16".
enum class SafetensorsDType : uint8_t { kF32, kF64, kI32, kI64, kBF16, kF16 };
absl::string_view SafetensorsDTypeName(SafetensorsDType dtype);
int64_t SafetensorsDTypeSize(SafetensorsDType dtype);
// InvalidArgument for a name outside the list above (safetensors has more: U8, BOOL, F8_E4M3, ...).
absl::StatusOr<SafetensorsDType> ParseSafetensorsDType(absl::string_view name);

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor to write: `data` (not owned) holds its bytes, product(shape) × dtype size of them.
struct TensorView {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // Empty for a scalar.
  absl::string_view data;
};

// The header and data of a whole file in memory: tensors in name order (so data offsets rise with
// the names), the header compact JSON with "__metadata__" first when there is any, space-padded
// to a multiple of 8 bytes as the reference implementation pads it, so the data is 8-aligned.
// InvalidArgument for an empty, "__metadata__" or repeated name, a negative dimension, or data
// whose size is not what the shape and dtype make.
absl::StatusOr<std::string> SerializeSafetensors(absl::Span<const TensorView> tensors,
                                                 const SafetensorsMetadata& metadata = {});

// Writes what SerializeSafetensors makes to `path`, by way of a new temporary file beside it that
// is renamed into place: a reader sees the old file or the new one, never a part, and a failed
// write leaves nothing behind. Only a regular file is replaced: InvalidArgument naming the path
// when it exists and is a directory, a device, a named pipe or a socket. A symbolic link is
// written through: the file it resolves to is replaced atomically (the temporary file goes beside
// that target) and the link stays; a link that resolves to nothing is refused. InvalidArgument
// as SerializeSafetensors; Internal with the path and errno's text when a write, flush or rename
// fails.
absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorView> tensors,
                              const SafetensorsMetadata& metadata = {});

// One tensor of a parsed file; `begin` and `end` are byte offsets into SafetensorsFile::bytes.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;

  int64_t NumElements() const;
  std::string SpecString() const;  // "F32[4, 3]"
};

// A parsed file, checked through: its entries lie inside the data, tile it without gap or
// overlap, and each has exactly the bytes its shape and dtype need.
struct SafetensorsFile {
  std::string bytes;                      // The whole file.
  std::vector<SafetensorsEntry> entries;  // In name order.
  SafetensorsMetadata metadata;

  const SafetensorsEntry* Find(absl::string_view name) const;
  absl::string_view Data(const SafetensorsEntry& entry) const {
    return absl::string_view(bytes).substr(entry.begin, entry.end - entry.begin);
  }
};

// The largest header accepted, as in the reference implementation: a length field above it is
// taken for a damaged or hostile file rather than allocated.
inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses `bytes`, a whole file; `origin` (the path) opens every error message. DataLoss when
// bytes are missing: shorter than the length field, a header running past the end, a tensor's
// data_offsets past the end of the data. InvalidArgument, naming the tensor, for anything else
// that is wrong: bad JSON, a header not starting with '{', a missing or ill-typed field, an
// unknown dtype, a negative or reversed offset, a byte span that is not shape × dtype size, two
// tensors overlapping or a gap between them, bytes no tensor covers, a name given twice.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string bytes, absl::string_view origin);

// Reads and parses the file at `path` (a symbolic link is followed). NotFound when there is no
// such file, InvalidArgument naming the path when it is not a regular file (a named pipe is
// refused at once, never waited on), DataLoss when it cannot be read, ResourceExhausted when its
// bytes cannot be allocated, then as ParseSafetensors.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_SAFETENSORS_H_
