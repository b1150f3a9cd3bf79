// JsonWriter: writes JSON text for dumps and benchmark results. No JSON library is in our stack,
// and writing is the easy half: strings are escaped per RFC 8259 (invalid UTF-8 becomes U+FFFD, so
// the output is always valid JSON), doubles are written in their shortest round-trip form, and
// NaN and the infinities, which JSON cannot hold, are written as null.
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("name").String("fc0.matmul");
//   w.Key("shape").BeginArray(JsonWriter::kInline).Int(32).Int(8).EndArray();
//   w.EndObject();
//   std::string text = std::move(w).str();  // {\n  "name": "fc0.matmul",\n  "shape": [32, 8]\n}
//
// The caller keeps the nesting right: a value inside an object follows a Key(), and every Begin
// has its End. The writer does not check; a test of the caller parsing its output does.
#ifndef REPRISE_SRC_UTIL_JSON_WRITER_H_
#define REPRISE_SRC_UTIL_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace reprise::util {

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

class JsonWriter {
 public:
  // How a container is laid out: one element per line, indented, or all on the current line.
  // Containers inside an inline container are inline too.
  enum Layout : uint8_t { kBlock, kInline };

  JsonWriter& BeginObject(Layout layout = kBlock);
  JsonWriter& EndObject();
  JsonWriter& BeginArray(Layout layout = kBlock);
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);

  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // The text written so far, with a final newline once the outermost container is closed.
  std::string str() &&;

 private:
  struct Level {
    bool inline_layout;
    bool empty;
  };
  void BeforeValue();
  JsonWriter& Begin(char open, Layout layout);
  JsonWriter& End(char close);
  void NewLine();

  std::string out_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_JSON_WRITER_H_
