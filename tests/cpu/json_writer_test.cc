// JsonWriter: string escaping (RFC 8259, invalid UTF-8 replaced), numbers, layout, and that what it
// writes parses back to the same values.
#include "src/util/json_writer.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tests/cpu/json_reader.h"

namespace reprise::util {
namespace {

using ::reprise::testing::JsonValue;
using ::reprise::testing::ParseJson;

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndNamedControls) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("fc0.matmul"), "\"fc0.matmul\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
}

TEST(JsonQuoteTest, EscapesOtherControlCharactersAsUnicode) {
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(JsonQuote("\x01\x1f"), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote("\x7f"), "\"\x7f\"");  // DEL needs no escape.
  EXPECT_EQ(JsonQuote("/"), "\"/\"");
}

TEST(JsonQuoteTest, KeepsWellFormedUtf8) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // café € 😀
  EXPECT_EQ(JsonQuote(text), "\"" + text + "\"");
}

TEST(JsonQuoteTest, ReplacesInvalidUtf8ByteByByte) {
  EXPECT_EQ(JsonQuote("a\xff"
                      "b"),
            "\"a\\ufffdb\"");                                         // Never valid.
  EXPECT_EQ(JsonQuote("\xc3"), "\"\\ufffd\"");                        // Truncated sequence.
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");             // Overlong '/'.
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // A UTF-16 surrogate.
  EXPECT_EQ(JsonQuote("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF.
}

TEST(JsonQuoteTest, EveryByteStringParsesBack) {
  std::string all;
  for (int c = 1; c < 128; ++c) all += static_cast<char>(c);
  auto parsed = ParseJson(JsonQuote(all));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->string, all);
}

TEST(JsonWriterTest, WritesNumbersShortestAndNonFiniteAsNull) {
  JsonWriter w;
  w.BeginArray(JsonWriter::kInline);
  w.Int(-7).Int(std::numeric_limits<int64_t>::max()).Double(0.1).Double(1e-5).Double(2.0);
  w.Double(std::nan("")).Double(std::numeric_limits<double>::infinity());
  w.EndArray();
  EXPECT_EQ(std::move(w).str(), "[-7, 9223372036854775807, 0.1, 1e-05, 2, null, null]\n");
}

TEST(JsonWriterTest, IndentsBlocksAndKeepsInlineContainersOnOneLine) {
  JsonWriter w;
  w.BeginObject();
  w.Key("name").String("x");
  w.Key("shape").BeginArray(JsonWriter::kInline).Int(32).Int(8).EndArray();
  w.Key("empty").BeginArray().EndArray();
  w.Key("nested").BeginObject().Key("ok").Bool(true).Key("none").Null().EndObject();
  w.EndObject();
  EXPECT_EQ(std::move(w).str(),
            "{\n"
            "  \"name\": \"x\",\n"
            "  \"shape\": [32, 8],\n"
            "  \"empty\": [],\n"
            "  \"nested\": {\n"
            "    \"ok\": true,\n"
            "    \"none\": null\n"
            "  }\n"
            "}\n");
}

TEST(JsonWriterTest, OutputParsesBackToTheSameValues) {
  JsonWriter w;
  w.BeginObject();
  w.Key("quote\"key").String("line\nbreak\ttab \xc3\xa9");
  w.Key("list").BeginArray(JsonWriter::kInline);
  w.BeginObject().Key("a").Int(1).EndObject().Double(-2.5).Bool(false);
  w.EndArray();
  w.EndObject();
  auto parsed = ParseJson(std::move(w).str());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_NE(parsed->Find("quote\"key"), nullptr);
  EXPECT_EQ((*parsed)["quote\"key"].string, "line\nbreak\ttab \xc3\xa9");
  const JsonValue& list = (*parsed)["list"];
  ASSERT_EQ(list.array.size(), 3u);
  EXPECT_EQ(list.array[0]["a"].integer, 1);
  EXPECT_EQ(list.array[1].number, -2.5);
  EXPECT_EQ(list.array[2].type, JsonValue::Type::kBool);
  EXPECT_FALSE(list.array[2].boolean);
}

}  // namespace
}  // namespace reprise::util
