#include "src/api/checkpoint_format.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/sha256.h"
#include "src/util/json_value.h"
#include "src/util/json_writer.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// One tensor as the checksum sees it.
struct DigestItem {
  absl::string_view name;
  util::SafetensorsDType dtype;
  absl::Span<const int64_t> shape;
  absl::string_view data;
};

// Each field goes in with its length first, so no two different files feed the same bytes.
void Feed(runtime::Sha256Hasher& hasher, absl::string_view field) {
  uint64_t size = field.size();
  char prefix[sizeof(size)];
  std::memcpy(prefix, &size, sizeof(size));
  hasher.Update(absl::string_view(prefix, sizeof(prefix)));
  hasher.Update(field);
}

// The checksum of everything but itself: header fields, the other metadata, the tensors.
std::string Digest(const CheckpointHeader& header, const util::SafetensorsMetadata& metadata,
                   std::vector<DigestItem> items) {
  std::sort(items.begin(), items.end(),
            [](const DigestItem& a, const DigestItem& b) { return a.name < b.name; });
  runtime::Sha256Hasher hasher;
  Feed(hasher, "reprise checkpoint");
  Feed(hasher, absl::StrCat(header.format_version));
  Feed(hasher, header.model);
  Feed(hasher, absl::StrCat(header.step));
  for (const auto& [key, value] : metadata) {
    if (key == kCheckpointMetadataKey) continue;
    Feed(hasher, key);
    Feed(hasher, value);
  }
  for (const DigestItem& item : items) {
    Feed(hasher, item.name);
    Feed(hasher, util::SafetensorsDTypeName(item.dtype));
    Feed(hasher, absl::StrJoin(item.shape, ","));
    Feed(hasher, item.data);
  }
  return runtime::ToHex(hasher.Finish());
}

util::SafetensorsMetadata MetadataFor(const CheckpointHeader& header,
                                      absl::Span<const util::TensorView> tensors) {
  util::SafetensorsMetadata metadata = {{"format", "pt"}};
  std::vector<DigestItem> items;
  for (const util::TensorView& t : tensors) items.push_back({t.name, t.dtype, t.shape, t.data});
  util::JsonWriter json;
  json.BeginObject(util::JsonWriter::kInline);
  json.Key("format_version").Int(header.format_version);
  json.Key("model").String(header.model);
  json.Key("step").Int(header.step);
  json.Key("sha256").String(Digest(header, metadata, std::move(items)));
  json.EndObject();
  std::string text = std::move(json).str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  metadata[kCheckpointMetadataKey] = std::move(text);
  return metadata;
}

absl::Status CheckHeaderForWrite(const CheckpointHeader& header) {
  if (header.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", header.step, " < 0"));
  }
  return absl::OkStatus();
}

// The member `key` of `object` if it has `type`, else InvalidArgument naming it.
absl::StatusOr<const util::JsonValue*> Member(const util::JsonValue& object, absl::string_view key,
                                              util::JsonValue::Type type,
                                              absl::string_view origin) {
  const util::JsonValue* value = object.Find(key);
  if (value == nullptr || value->type() != type) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": checkpoint header has no ", util::JsonValue::TypeName(type), " \"", key, "\""));
  }
  return value;
}

absl::StatusOr<int64_t> IntegerMember(const util::JsonValue& object, absl::string_view key,
                                      absl::string_view origin) {
  ASSIGN_OR_RETURN(const util::JsonValue* value,
                   Member(object, key, util::JsonValue::Type::kNumber, origin));
  if (!value->is_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": checkpoint header field \"", key, "\" is not an integer"));
  }
  return value->integer();
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The header of a parsed safetensors file, checked against the file's contents.
absl::StatusOr<Checkpoint> FromFile(util::SafetensorsFile file, absl::string_view origin) {
  Checkpoint checkpoint;
  checkpoint.file = std::move(file);
  auto text = checkpoint.file.metadata.find(kCheckpointMetadataKey);
  if (text == checkpoint.file.metadata.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not a reprise checkpoint (no \"", kCheckpointMetadataKey,
                     "\" metadata); a file of weights alone is read with Trainer::LoadWeights"));
  }
  absl::StatusOr<util::JsonValue> json = util::ParseJson(text->second);
  if (!json.ok() || !json->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": checkpoint header is not a JSON object: ",
                     json.ok() ? "another JSON value" : json.status().message()));
  }
  CheckpointHeader& header = checkpoint.header;
  ASSIGN_OR_RETURN(header.format_version, IntegerMember(*json, "format_version", origin));
  if (header.format_version != kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": checkpoint format version ",
                                                   header.format_version, "; this build reads ",
                                                   kCheckpointFormatVersion));
  }
  ASSIGN_OR_RETURN(const util::JsonValue* model,
                   Member(*json, "model", util::JsonValue::Type::kString, origin));
  header.model = model->string();
  ASSIGN_OR_RETURN(header.step, IntegerMember(*json, "step", origin));
  if (header.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": checkpoint step ", header.step, " < 0"));
  }
  ASSIGN_OR_RETURN(const util::JsonValue* sha,
                   Member(*json, "sha256", util::JsonValue::Type::kString, origin));
  std::vector<DigestItem> items;
  for (const util::SafetensorsEntry& entry : checkpoint.file.entries) {
    items.push_back({entry.name, entry.dtype, entry.shape, checkpoint.file.Data(entry)});
  }
  const std::string digest = Digest(header, checkpoint.file.metadata, std::move(items));
  if (digest != sha->string()) {
    return absl::DataLossError(absl::StrCat(origin,
                                            ": checkpoint checksum mismatch (the file is "
                                            "corrupt): header says sha256 ",
                                            sha->string(), ", contents hash to ", digest));
  }
  return checkpoint;
}

}  // namespace

absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointHeader& header,
                                                absl::Span<const util::TensorView> tensors) {
  RETURN_IF_ERROR(CheckHeaderForWrite(header));
  return util::SerializeSafetensors(tensors, MetadataFor(header, tensors));
}

absl::Status WriteCheckpoint(const std::string& path, const CheckpointHeader& header,
                             absl::Span<const util::TensorView> tensors) {
  RETURN_IF_ERROR(CheckHeaderForWrite(header));
  return util::WriteSafetensors(path, tensors, MetadataFor(header, tensors));
}

absl::StatusOr<Checkpoint> ParseCheckpoint(std::string bytes, absl::string_view origin) {
  ASSIGN_OR_RETURN(util::SafetensorsFile file, util::ParseSafetensors(std::move(bytes), origin));
  return FromFile(std::move(file), origin);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(util::SafetensorsFile file, util::ReadSafetensors(path));
  return FromFile(std::move(file), path);
}

absl::Status CheckCheckpointMatches(const Checkpoint& checkpoint, absl::string_view origin,
                                    absl::string_view model,
                                    absl::Span<const ExpectedTensor> expected) {
  if (checkpoint.header.model != model) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": checkpoint of another model (fingerprint ", checkpoint.header.model,
                     "; this trainer's model is ", model, ")"));
  }
  absl::flat_hash_map<absl::string_view, const ExpectedTensor*> known;
  for (const ExpectedTensor& t : expected) {
    known[t.name] = &t;
    const util::SafetensorsEntry* entry = checkpoint.file.Find(t.name);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": checkpoint has no tensor '", t.name, "'"));
    }
    if (entry->dtype != t.dtype || entry->shape != t.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": tensor '", t.name, "' is ", entry->SpecString(), " in the checkpoint but ",
          util::SafetensorsDTypeName(t.dtype), ShapeString(t.shape), " in the model"));
    }
  }
  for (const util::SafetensorsEntry& entry : checkpoint.file.entries) {
    if (!known.contains(entry.name)) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": checkpoint tensor '", entry.name,
                                                     "' is not part of this model's state"));
    }
  }
  return absl::OkStatus();
}

}  // namespace reprise
