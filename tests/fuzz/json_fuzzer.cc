// libFuzzer target: the JSON parser (src/util/json_value.h), which reads untrusted text such as a
// safetensors header. Either a Status or a value whose every part can be walked; never a crash,
// a stack overflow (nesting is bounded), an exception or undefined behaviour.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "src/util/json_value.h"

namespace {

// Touches every part of `v`; returns a count so that nothing is optimised away.
size_t Walk(const reprise::util::JsonValue& v) {
  size_t n = 1;
  if (v.is_string()) n += v.string().size();
  if (v.is_array()) {
    for (const auto& e : v.elements()) n += Walk(e);
  }
  if (v.is_object()) {
    for (const auto& [key, value] : v.members()) {
      n += key.size() + Walk(value);
      if (v.Find(key) == nullptr) __builtin_trap();  // Every member can be found by its key.
    }
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<reprise::util::JsonValue> value = reprise::util::ParseJson(text);
  if (value.ok()) {
    volatile size_t parts = Walk(*value);
    (void)parts;
  }
  (void)reprise::util::IsValidUtf8(text);
  return 0;
}
