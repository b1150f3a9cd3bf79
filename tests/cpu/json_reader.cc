#include "tests/cpu/json_reader.h"

#include <charconv>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::testing {
namespace {

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Document() {
    ASSIGN_OR_RETURN(JsonValue value, Value());
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters after the value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON error at byte ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(absl::string_view token) {
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }

  absl::StatusOr<JsonValue> Value() {
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end of input");
    JsonValue v;
    const char c = text_[pos_];
    if (c == '{') return Object();
    if (c == '[') return Array();
    if (c == '"') {
      v.type = JsonValue::Type::kString;
      ASSIGN_OR_RETURN(v.string, String());
      return v;
    }
    if (Consume("true") || Consume("false")) {
      v.type = JsonValue::Type::kBool;
      v.boolean = text_.substr(pos_ - 4, 4) == "true";
      return v;
    }
    if (Consume("null")) return v;
    if (c == '-' || absl::ascii_isdigit(c)) return Number();
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::StatusOr<JsonValue> Object() {
    JsonValue v;
    v.type = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Consume("}")) return v;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
      ASSIGN_OR_RETURN(std::string key, String());
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      ASSIGN_OR_RETURN(JsonValue member, Value());
      v.object.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (Consume("}")) return v;
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::StatusOr<JsonValue> Array() {
    JsonValue v;
    v.type = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume("]")) return v;
    while (true) {
      ASSIGN_OR_RETURN(JsonValue element, Value());
      v.array.push_back(std::move(element));
      SkipSpace();
      if (Consume("]")) return v;
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (pos_ + 4 > text_.size()) return Error("short \\u escape");
    uint32_t code = 0;
    const auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
    if (ec != std::errc() || end != text_.data() + pos_ + 4) return Error("bad \\u escape");
    pos_ += 4;
    return code;
  }

  static void AppendUtf8(uint32_t code, std::string& out) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  absl::StatusOr<std::string> String() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return Error("unescaped control character");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          ASSIGN_OR_RETURN(uint32_t code, Hex4());
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (!Consume("\\u")) return Error("unpaired high surrogate");
            ASSIGN_OR_RETURN(uint32_t low, Hex4());
            if (low < 0xDC00 || low > 0xDFFF) return Error("bad low surrogate");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code <= 0xDFFF) {
            return Error("unpaired low surrogate");
          }
          AppendUtf8(code, out);
          break;
        }
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  absl::StatusOr<JsonValue> Number() {
    const size_t start = pos_;
    bool integer = true;
    Consume("-");
    if (Consume("0")) {
      // A leading zero stands alone.
    } else if (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) {
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
    } else {
      return Error("expected digits");
    }
    if (Consume(".")) {
      integer = false;
      if (pos_ >= text_.size() || !absl::ascii_isdigit(text_[pos_])) {
        return Error("expected digits after '.'");
      }
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (!Consume("+")) Consume("-");
      if (pos_ >= text_.size() || !absl::ascii_isdigit(text_[pos_])) {
        return Error("expected exponent digits");
      }
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
    }
    const std::string literal(text_.substr(start, pos_ - start));
    JsonValue v;
    v.type = JsonValue::Type::kNumber;
    v.number = std::strtod(literal.c_str(), nullptr);
    if (integer) {
      const auto [end, ec] =
          std::from_chars(literal.data(), literal.data() + literal.size(), v.integer);
      v.is_integer = ec == std::errc() && end == literal.data() + literal.size();
    }
    return v;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

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

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).Document(); }

}  // namespace reprise::testing
