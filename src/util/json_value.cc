#include "src/util/json_value.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::util {

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Integer(int64_t value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.is_integer_ = true;
  v.integer_ = value;
  v.number_ = static_cast<double>(value);
  return v;
}

JsonValue JsonValue::Number(double value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = value;
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(value);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> elements) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.elements_ = std::move(elements);
  return v;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.members_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

absl::string_view JsonValue::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "bool";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
  }
  return "?";
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF), or 0 if there is none.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xbf;  // The range of the second byte.
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return length;
}

void AppendUtf8(uint32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    ASSIGN_OR_RETURN(JsonValue value, ParseValue(0));
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected text after the value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", pos_));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    SkipWhitespace();
    if (AtEnd()) return Error("unexpected end of text, expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1);
      case '[':
        return ParseArray(depth + 1);
      case '"': {
        ASSIGN_OR_RETURN(std::string s, ParseString());
        return JsonValue::String(std::move(s));
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true));
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false));
      case 'n':
        return ParseLiteral("null", JsonValue());
      default:
        return ParseNumber();
    }
  }

  absl::StatusOr<JsonValue> ParseLiteral(absl::string_view word, JsonValue value) {
    if (text_.substr(pos_, word.size()) != word) return Error("unknown literal");
    pos_ += word.size();
    return value;
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    if (depth > kMaxJsonDepth) return Error("nesting too deep");
    ++pos_;  // '{'
    std::vector<JsonValue::Member> members;
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return JsonValue::Object(std::move(members));
    }
    while (true) {
      SkipWhitespace();
      if (AtEnd() || Peek() != '"') return Error("expected a string key");
      ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Error("expected ':' after a key");
      ++pos_;
      ASSIGN_OR_RETURN(JsonValue value, ParseValue(depth));
      members.emplace_back(std::move(key), std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("unterminated object");
      if (Peek() == '}') break;
      if (Peek() != ',') return Error("expected ',' or '}' in an object");
      ++pos_;
    }
    ++pos_;
    return JsonValue::Object(std::move(members));
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    if (depth > kMaxJsonDepth) return Error("nesting too deep");
    ++pos_;  // '['
    std::vector<JsonValue> elements;
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return JsonValue::Array(std::move(elements));
    }
    while (true) {
      ASSIGN_OR_RETURN(JsonValue value, ParseValue(depth));
      elements.push_back(std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("unterminated array");
      if (Peek() == ']') break;
      if (Peek() != ',') return Error("expected ',' or ']' in an array");
      ++pos_;
    }
    ++pos_;
    return JsonValue::Array(std::move(elements));
  }

  // Four hex digits after "\u".
  absl::StatusOr<uint32_t> ParseHex4() {
    if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return Error("bad \\u escape");
      code = code * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(c))
                              ? c - '0'
                              : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    }
    pos_ += 4;
    return code;
  }

  absl::StatusOr<uint32_t> ParseUnicodeEscape() {
    ASSIGN_OR_RETURN(uint32_t code, ParseHex4());
    if (code >= 0xdc00 && code <= 0xdfff) return Error("unpaired low surrogate");
    if (code < 0xd800 || code > 0xdbff) return code;
    if (text_.substr(pos_, 2) != "\\u") return Error("unpaired high surrogate");
    pos_ += 2;
    ASSIGN_OR_RETURN(uint32_t low, ParseHex4());
    if (low < 0xdc00 || low > 0xdfff) return Error("unpaired high surrogate");
    return 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = Peek();
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        const size_t length = Utf8SequenceLength(text_.substr(pos_));
        if (length == 0) return Error("invalid UTF-8 in a string");
        out.append(text_.data() + pos_, length);
        pos_ += length;
        continue;
      }
      ++pos_;
      if (AtEnd()) return Error("unterminated escape");
      const char e = Peek();
      ++pos_;
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
          ASSIGN_OR_RETURN(uint32_t code, ParseUnicodeEscape());
          AppendUtf8(code, out);
          break;
        }
        default:
          --pos_;
          return Error("unknown escape");
      }
    }
    ++pos_;
    return out;
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (!AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
      return pos_ - from;
    };
    if (!AtEnd() && Peek() == '-') ++pos_;
    if (AtEnd() || !absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      return Error("expected a value");
    }
    if (Peek() == '0') {
      ++pos_;
    } else {
      digits();
    }
    bool integral = true;
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) return Error("expected digits after '.'");
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      integral = false;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (digits() == 0) return Error("expected digits in an exponent");
    }
    const absl::string_view token = text_.substr(start, pos_ - start);
    int64_t integer = 0;
    if (integral && absl::SimpleAtoi(token, &integer)) return JsonValue::Integer(integer);
    double number = 0;
    if (!absl::SimpleAtod(token, &number)) return Error("number out of range");
    return JsonValue::Number(number);
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  while (!text.empty()) {
    const size_t length = Utf8SequenceLength(text);
    if (length == 0) return false;
    text.remove_prefix(length);
  }
  return true;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace reprise::util
