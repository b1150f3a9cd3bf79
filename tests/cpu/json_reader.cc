#include "tests/cpu/json_reader.h"

#include "src/util/json_value.h"
#include "src/util/status_macros.h"

namespace reprise::testing {
namespace {

// The tests' plain-struct view of the engine's parser's value.
JsonValue FromUtil(const util::JsonValue& in) {
  JsonValue out;
  switch (in.type()) {
    case util::JsonValue::Type::kNull:
      out.type = JsonValue::Type::kNull;
      break;
    case util::JsonValue::Type::kBool:
      out.type = JsonValue::Type::kBool;
      out.boolean = in.bool_value();
      break;
    case util::JsonValue::Type::kNumber:
      out.type = JsonValue::Type::kNumber;
      out.number = in.number();
      out.is_integer = in.is_integer();
      out.integer = in.integer();
      break;
    case util::JsonValue::Type::kString:
      out.type = JsonValue::Type::kString;
      out.string = in.string();
      break;
    case util::JsonValue::Type::kArray:
      out.type = JsonValue::Type::kArray;
      for (const util::JsonValue& e : in.elements()) out.array.push_back(FromUtil(e));
      break;
    case util::JsonValue::Type::kObject:
      out.type = JsonValue::Type::kObject;
      for (const auto& [name, value] : in.members()) out.object.emplace_back(name, FromUtil(value));
      break;
  }
  return out;
}

}  // namespace

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [name, value] : object) {
    if (name == key) return &value;
  }
  return nullptr;
}

const JsonValue& JsonValue::operator[](absl::string_view key) const {
  static const JsonValue* const kNull = new JsonValue();
  const JsonValue* found = Find(key);
  return found == nullptr ? *kNull : *found;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  ASSIGN_OR_RETURN(util::JsonValue value, util::ParseJson(text));
  return FromUtil(value);
}

}  // namespace reprise::testing
