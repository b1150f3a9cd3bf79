// JSON for tests that read back what JsonWriter, the dumps and the bench write: the engine's own
// strict parser (src/util/json_value.h) seen as a plain struct whose lookups chain, v["a"]["b"].
#ifndef REPRISE_TESTS_CPU_JSON_READER_H_
#define REPRISE_TESTS_CPU_JSON_READER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::testing {

struct JsonValue {
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // The number was written without fraction or exponent.
  int64_t integer = 0;      // Its exact value when is_integer.
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // In document order.

  // The member named `key` of an object; null when absent or not an object.
  const JsonValue* Find(absl::string_view key) const;
  // Like Find, but a missing member is a null value, so lookups chain: v["a"]["b"].
  const JsonValue& operator[](absl::string_view key) const;
};

// Parses exactly one JSON value (surrounding whitespace allowed). InvalidArgument names the byte
// offset of the first error.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_JSON_READER_H_
