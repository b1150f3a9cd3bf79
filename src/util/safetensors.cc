#include "src/util/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/util/file_target.h"
#include "src/util/json_value.h"
#include "src/util/json_writer.h"
#include "src/util/status_macros.h"

namespace reprise::util {
namespace {

// Indexed by SafetensorsDType.
struct DTypeInfo {
  SafetensorsDType dtype;
  absl::string_view name;
  int64_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::kF32, "F32", 4},   {SafetensorsDType::kF64, "F64", 8},
    {SafetensorsDType::kI32, "I32", 4},   {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kBF16, "BF16", 2}, {SafetensorsDType::kF16, "F16", 2},
};
constexpr char kMetadataKey[] = "__metadata__";

// product(shape) × element size, or -1 for a negative dimension or a count past int64.
int64_t ByteCount(absl::Span<const int64_t> shape, int64_t element_bytes) {
  int64_t bytes = element_bytes;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && bytes > std::numeric_limits<int64_t>::max() / d)) return -1;
    bytes *= d;
  }
  return bytes;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string ErrnoText(int error) { return std::strerror(error); }

// The compact JSON header, padded, after its 8-byte length; and the tensors in file order.
struct Layout {
  std::string header;
  std::vector<const TensorView*> order;
};

absl::StatusOr<Layout> LayOut(absl::Span<const TensorView> tensors,
                              const SafetensorsMetadata& metadata) {
  Layout layout;
  for (const TensorView& t : tensors) layout.order.push_back(&t);
  std::sort(layout.order.begin(), layout.order.end(),
            [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
  std::string json = "{";
  if (!metadata.empty()) {
    absl::StrAppend(&json, JsonQuote(kMetadataKey), ":{");
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors metadata entry ", JsonQuote(key), " is not UTF-8"));
      }
      if (json.back() != '{') json += ',';
      absl::StrAppend(&json, JsonQuote(key), ":", JsonQuote(value));
    }
    json += '}';
  }
  int64_t offset = 0;
  for (size_t i = 0; i < layout.order.size(); ++i) {
    const TensorView& t = *layout.order[i];
    if (t.name.empty() || t.name == kMetadataKey || !IsValidUtf8(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors cannot hold a tensor named ", JsonQuote(t.name)));
    }
    if (i > 0 && layout.order[i - 1]->name == t.name) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is given twice"));
    }
    const int64_t bytes = ByteCount(t.shape, SafetensorsDTypeSize(t.dtype));
    if (bytes < 0 || bytes != static_cast<int64_t>(t.data.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is ", SafetensorsDTypeName(t.dtype),
                       ShapeString(t.shape), " but has ", t.data.size(), " bytes of data"));
    }
    if (json.size() > 1) json += ',';
    absl::StrAppend(&json, JsonQuote(t.name), ":{\"dtype\":\"", SafetensorsDTypeName(t.dtype),
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset,
                    ",", offset + bytes, "]}");
    offset += bytes;
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // So the data starts 8-byte aligned.
  layout.header.resize(8);
  for (int i = 0; i < 8; ++i)
    layout.header[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> 8 * i);
  layout.header += json;
  return layout;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("write: ", ErrnoText(errno)));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Writes `pieces` to `temporary` (a new file), flushes it and renames it to `path`.
absl::Status WriteAndRename(const std::string& temporary, const std::string& path, int fd,
                            absl::Span<const absl::string_view> pieces) {
  absl::Status status;
  for (absl::string_view piece : pieces) {
    status = WriteAll(fd, piece);
    if (!status.ok()) break;
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::InternalError(absl::StrCat("fsync: ", ErrnoText(errno)));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("close: ", ErrnoText(errno)));
  }
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("rename into place: ", ErrnoText(errno)));
  }
  return status;
}

// The name, dtype, shape and offsets of one header member, checked on their own.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const JsonValue& info) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!info.is_object())
    return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
  SafetensorsEntry entry{.name = name};
  const JsonValue* dtype = info.Find("dtype");
  if (dtype == nullptr || !dtype->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no string \"dtype\""));
  }
  absl::StatusOr<SafetensorsDType> parsed = ParseSafetensorsDType(dtype->string());
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  entry.dtype = *parsed;
  const JsonValue* shape = info.Find("shape");
  if (shape == nullptr || !shape->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no \"shape\" array"));
  }
  for (const JsonValue& d : shape->elements()) {
    if (!d.is_integer() || d.integer() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"shape\" must hold non-negative integers"));
    }
    entry.shape.push_back(d.integer());
  }
  const JsonValue* offsets = info.Find("data_offsets");
  if (offsets == nullptr || !offsets->is_array() || offsets->elements().size() != 2 ||
      !offsets->elements()[0].is_integer() || !offsets->elements()[1].is_integer() ||
      offsets->elements()[0].integer() < 0 || offsets->elements()[1].integer() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"data_offsets\" must be two non-negative integers"));
  }
  entry.begin = offsets->elements()[0].integer();
  entry.end = offsets->elements()[1].integer();
  if (entry.end < entry.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets [", entry.begin, ", ", entry.end, "] are reversed"));
  }
  return entry;
}

absl::Status ParseMetadata(const JsonValue& value, SafetensorsMetadata& metadata) {
  if (!value.is_object()) return absl::InvalidArgumentError("\"__metadata__\" is not an object");
  for (const auto& [key, text] : value.members()) {
    if (!text.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"__metadata__\" entry '", key, "' is not a string"));
    }
    if (!metadata.emplace(key, text.string()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"__metadata__\" entry '", key, "' is given twice"));
    }
  }
  return absl::OkStatus();
}

// Checks the entries (offsets relative to the data) against the data's `size` bytes: each in
// range and of the right length, together covering it exactly once.
absl::Status CheckCoverage(std::vector<SafetensorsEntry>& entries, int64_t size) {
  for (const SafetensorsEntry& e : entries) {
    if (e.end > size) {
      return absl::DataLossError(absl::StrCat("tensor '", e.name, "' data_offsets [", e.begin, ", ",
                                              e.end, "] run past the end of the data (", size,
                                              " bytes): the file is truncated"));
    }
    const int64_t bytes = ByteCount(e.shape, SafetensorsDTypeSize(e.dtype));
    if (bytes != e.end - e.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", e.name, "' is ", e.SpecString(), " (",
          bytes < 0 ? std::string("too many") : absl::StrCat(bytes), " bytes) but data_offsets [",
          e.begin, ", ", e.end, "] hold ", e.end - e.begin));
    }
  }
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  int64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < covered) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", previous->name, "' [", previous->begin, ", ", previous->end,
                       ") and '", e->name, "' [", e->begin, ", ", e->end, ") overlap"));
    }
    if (e->begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat("data bytes [", covered, ", ", e->begin,
                                                     ") before tensor '", e->name,
                                                     "' belong to no tensor"));
    }
    covered = e->end;
    previous = e;
  }
  if (covered != size) {
    return absl::InvalidArgumentError(absl::StrCat("data bytes [", covered, ", ", size,
                                                   ") after the last tensor belong to no tensor"));
  }
  return absl::OkStatus();
}

bool ResizeNoThrow(std::string& bytes, size_t size) {
  try {
    bytes.resize(size);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::length_error&) {
    return false;
  }
}

}  // namespace

absl::string_view SafetensorsDTypeName(SafetensorsDType dtype) {
  return kDTypes[static_cast<int>(dtype)].name;
}

int64_t SafetensorsDTypeSize(SafetensorsDType dtype) {
  return kDTypes[static_cast<int>(dtype)].bytes;
}

absl::StatusOr<SafetensorsDType> ParseSafetensorsDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", JsonQuote(name), " is not one of F32, F64, I32, I64, BF16, F16"));
}

int64_t SafetensorsEntry::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsEntry::SpecString() const {
  return absl::StrCat(SafetensorsDTypeName(dtype), ShapeString(shape));
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it =
      std::lower_bound(entries.begin(), entries.end(), name,
                       [](const SafetensorsEntry& e, absl::string_view n) { return e.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<std::string> SerializeSafetensors(absl::Span<const TensorView> tensors,
                                                 const SafetensorsMetadata& metadata) {
  ASSIGN_OR_RETURN(Layout layout, LayOut(tensors, metadata));
  std::string out = std::move(layout.header);
  for (const TensorView* t : layout.order) out.append(t->data.data(), t->data.size());
  return out;
}

absl::Status WriteSafetensors(const std::string& requested_path,
                              absl::Span<const TensorView> tensors,
                              const SafetensorsMetadata& metadata) {
  ASSIGN_OR_RETURN(const std::string path, ResolveWriteTarget(requested_path));
  ASSIGN_OR_RETURN(Layout layout, LayOut(tensors, metadata));
  std::vector<absl::string_view> pieces = {layout.header};
  for (const TensorView* t : layout.order) pieces.push_back(t->data);
  std::random_device random;
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temporary = absl::StrFormat("%s.tmp.%d.%08x%08x", path, ::getpid(), random(), random());
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("writing ", path, ": creating ", temporary, ": ", ErrnoText(errno)));
  }
  const absl::Status status = WriteAndRename(temporary, path, fd, pieces);
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string bytes, absl::string_view origin) {
  auto fail = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(origin, ": ", status.message()));
  };
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8) {
    return fail(absl::DataLossError(
        absl::StrCat("the file has ", size, " bytes, fewer than the 8-byte header length")));
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | static_cast<uint8_t>(bytes[i]);
  if (header_bytes > static_cast<uint64_t>(size - 8)) {
    return fail(absl::DataLossError(absl::StrCat("the header length ", header_bytes,
                                                 " runs past the end of the file (", size,
                                                 " bytes): the file is truncated")));
  }
  if (header_bytes > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return fail(absl::InvalidArgumentError(absl::StrCat("the header length ", header_bytes,
                                                        " is above the limit of ",
                                                        kMaxSafetensorsHeaderBytes, " bytes")));
  }
  const absl::string_view header = absl::string_view(bytes).substr(8, header_bytes);
  if (header.empty() || header[0] != '{') {
    return fail(absl::InvalidArgumentError("the header does not start with '{'"));
  }
  absl::StatusOr<JsonValue> json = ParseJson(header);
  if (!json.ok())
    return fail(absl::InvalidArgumentError(absl::StrCat("header: ", json.status().message())));
  if (!json->is_object()) return fail(absl::InvalidArgumentError("the header is not an object"));

  SafetensorsFile file;
  bool has_metadata = false;
  absl::flat_hash_set<std::string> names;
  for (const auto& [name, info] : json->members()) {
    if (name == kMetadataKey) {
      if (has_metadata) return fail(absl::InvalidArgumentError("\"__metadata__\" is given twice"));
      has_metadata = true;
      if (absl::Status s = ParseMetadata(info, file.metadata); !s.ok()) return fail(s);
      continue;
    }
    // The writer refuses an unnamed tensor too: what is read here can always be written again.
    if (name.empty()) return fail(absl::InvalidArgumentError("a tensor has an empty name"));
    if (!names.insert(name).second) {
      return fail(absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is given twice")));
    }
    absl::StatusOr<SafetensorsEntry> entry = ParseEntry(name, info);
    if (!entry.ok()) return fail(entry.status());
    file.entries.push_back(*std::move(entry));
  }
  const int64_t data_start = 8 + static_cast<int64_t>(header_bytes);
  if (absl::Status s = CheckCoverage(file.entries, size - data_start); !s.ok()) return fail(s);
  for (SafetensorsEntry& e : file.entries) {
    e.begin += data_start;
    e.end += data_start;
  }
  std::sort(file.entries.begin(), file.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  file.bytes = std::move(bytes);
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  // O_NONBLOCK: opening a named pipe must not wait for a writer; the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const std::string why = ErrnoText(errno);
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": ", why));
    return absl::DataLossError(absl::StrCat(path, ": cannot open: ", why));
  }
  struct stat st;
  std::string bytes;
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = absl::DataLossError(absl::StrCat(path, ": cannot stat: ", ErrnoText(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", FileKindName(st.st_mode), ", not a regular file"));
  } else if (!ResizeNoThrow(bytes, static_cast<size_t>(st.st_size))) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate ", st.st_size, " bytes to read it"));
  } else {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        status = absl::DataLossError(absl::StrCat(path, ": read: ", ErrnoText(errno)));
        break;
      }
      if (got == 0) break;  // Shorter than fstat said: parsing tells what is missing.
      done += static_cast<size_t>(got);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return ParseSafetensors(std::move(bytes), path);
}

}  // namespace reprise::util
