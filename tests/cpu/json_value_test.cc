// ParseJson: every JSON type, escapes decoded to UTF-8, integers kept exact, duplicates kept in
// document order, and malformed text rejected with the byte offset.
#include "src/util/json_value.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise::util {
namespace {

using ::testing::HasSubstr;

TEST(JsonValueTest, ParsesEveryType) {
  absl::StatusOr<JsonValue> v = ParseJson(
      R"( {"n": null, "t": true, "f": false, "i": -42, "d": 2.5e1, "s": "x", "a": [1, [2]], "o": {}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  EXPECT_TRUE(v->Find("n")->is_null());
  EXPECT_TRUE(v->Find("t")->bool_value());
  EXPECT_FALSE(v->Find("f")->bool_value());
  EXPECT_TRUE(v->Find("i")->is_integer());
  EXPECT_EQ(v->Find("i")->integer(), -42);
  EXPECT_FALSE(v->Find("d")->is_integer());
  EXPECT_EQ(v->Find("d")->number(), 25.0);
  EXPECT_EQ(v->Find("s")->string(), "x");
  ASSERT_EQ(v->Find("a")->elements().size(), 2u);
  EXPECT_EQ(v->Find("a")->elements()[1].elements()[0].integer(), 2);
  EXPECT_TRUE(v->Find("o")->is_object());
  EXPECT_EQ(v->Find("absent"), nullptr);
}

TEST(JsonValueTest, IntegersAreExactAndLargeOnesBecomeDoubles) {
  EXPECT_EQ(ParseJson("9007199254740993")->integer(), int64_t{9007199254740993});
  EXPECT_EQ(ParseJson("-9223372036854775808")->integer(), INT64_MIN);
  absl::StatusOr<JsonValue> big = ParseJson("9223372036854775808");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->is_integer());
  EXPECT_TRUE(big->is_number());
}

TEST(JsonValueTest, DecodesEscapesToUtf8) {
  absl::StatusOr<JsonValue> v = ParseJson(R"("a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00")");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->string(), "a\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(ParseJson("\"\xc3\xa9\"")->string(), "\xc3\xa9");
}

TEST(JsonValueTest, KeepsDuplicateKeysInOrder) {
  absl::StatusOr<JsonValue> v = ParseJson(R"({"k": 1, "k": 2})");
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->members().size(), 2u);
  EXPECT_EQ(v->Find("k")->integer(), 1);
  EXPECT_EQ(v->members()[1].second.integer(), 2);
}

TEST(JsonValueTest, RejectsMalformedTextWithTheOffset) {
  for (const char* text : {"",
                           "{",
                           "[1,]",
                           "{\"a\" 1}",
                           "01",
                           "1.",
                           "1e",
                           "-",
                           "tru",
                           "\"abc",
                           "\"\\x\"",
                           "\"\\u12\"",
                           "\"\\udc00\"",
                           "\"\\ud800x\"",
                           "\"\x01\"",
                           "\"\xc0\xaf\"",
                           "\"\xed\xa0\x80\"",
                           "[] []",
                           "{1: 2}",
                           "nul"}) {
    absl::StatusOr<JsonValue> v = ParseJson(text);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(), HasSubstr("at byte ")) << text;
  }
  EXPECT_THAT(ParseJson("[1, 2 x").status().message(), HasSubstr("at byte 6"));
}

TEST(JsonValueTest, BoundsNesting) {
  EXPECT_TRUE(ParseJson(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')).ok());
  EXPECT_THAT(ParseJson(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']'))
                  .status()
                  .message(),
              HasSubstr("nesting too deep"));
}

TEST(JsonValueTest, ChecksUtf8) {
  EXPECT_TRUE(IsValidUtf8("plain \xc3\xa9 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // Truncated.
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // Above U+10FFFF.
}

}  // namespace
}  // namespace reprise::util
