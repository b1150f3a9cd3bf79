// JsonValue and ParseJson: a small strict JSON (RFC 8259) parser for headers the engine reads from
// files it did not write, such as safetensors headers. The input is untrusted: every error is a
// Status naming the byte offset, nesting is bounded, and nothing is read past the end.
//
//   ASSIGN_OR_RETURN(util::JsonValue header, util::ParseJson(text));
//   if (const util::JsonValue* shape = header.Find("shape"); shape && shape->is_array()) ...
//
// Objects keep their members in document order, duplicates included, so that callers can report
// a duplicated key by name. Numbers without fraction or exponent that fit in int64 are kept exact.
#ifndef REPRISE_SRC_UTIL_JSON_VALUE_H_
#define REPRISE_SRC_UTIL_JSON_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::util {

class JsonValue {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  static JsonValue Bool(bool value);
  static JsonValue Integer(int64_t value);
  static JsonValue Number(double value);
  static JsonValue String(std::string value);
  static JsonValue Array(std::vector<JsonValue> elements);
  static JsonValue Object(std::vector<Member> members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  // A number written without fraction or exponent whose value fits in int64.
  bool is_integer() const { return type_ == Type::kNumber && is_integer_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Each accessor's value is meaningful only for its own type (false, 0 or empty otherwise).
  bool bool_value() const { return bool_; }
  int64_t integer() const { return integer_; }
  double number() const { return number_; }
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& elements() const { return elements_; }
  const std::vector<Member>& members() const { return members_; }

  // The first member called `key`; null when there is none or this is not an object.
  const JsonValue* Find(absl::string_view key) const;

  // "null", "bool", "number", "string", "array" or "object", for error messages.
  static absl::string_view TypeName(Type type);

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_integer_ = false;
  int64_t integer_ = 0;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> elements_;
  std::vector<Member> members_;
};

// Arrays and objects nested deeper than this are rejected, so a hostile file cannot exhaust the
// stack of the recursive parser.
inline constexpr int kMaxJsonDepth = 64;

// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code points
// above U+10FFFF), as JSON strings must be.
bool IsValidUtf8(absl::string_view text);

// Parses exactly one JSON value; whitespace may surround it. Strings must be valid UTF-8 (escapes
// are decoded, surrogate pairs included). InvalidArgument says what was wrong at which byte offset.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_JSON_VALUE_H_
