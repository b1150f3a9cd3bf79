// The tests' JSON reader: it accepts what RFC 8259 allows and rejects the rest, so a dump that
// reads back is valid JSON, not merely something a lenient parser tolerates.
#include "tests/cpu/json_reader.h"

#include "gtest/gtest.h"

namespace reprise::testing {
namespace {

TEST(JsonReaderTest, ReadsEveryKindOfValue) {
  auto v = ParseJson(
      R"( {"n": null, "t": true, "f": false, "i": -12, "d": 2.5e1, "s": "a\u00e9\ud83d\ude00",
           "a": [1, [2]], "o": {"k": "v"}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->type, JsonValue::Type::kObject);
  EXPECT_EQ((*v)["n"].type, JsonValue::Type::kNull);
  EXPECT_TRUE((*v)["t"].boolean);
  EXPECT_EQ((*v)["f"].type, JsonValue::Type::kBool);
  EXPECT_FALSE((*v)["f"].boolean);
  EXPECT_TRUE((*v)["i"].is_integer);
  EXPECT_EQ((*v)["i"].integer, -12);
  EXPECT_FALSE((*v)["d"].is_integer);
  EXPECT_EQ((*v)["d"].number, 25.0);
  EXPECT_EQ((*v)["s"].string, "a\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ((*v)["a"].array[1].array[0].integer, 2);
  EXPECT_EQ((*v)["o"]["k"].string, "v");
  EXPECT_EQ((*v)["missing"]["deeper"].type, JsonValue::Type::kNull);
}

TEST(JsonReaderTest, RejectsWhatJsonDoesNotAllow) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "{'a': 1}", "01", "1.", "-", "+1",
                          "\"tab\there\"", "\"\\x\"", "\"\\ud800\"", "nul", "[1] 2", "NaN"}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << "accepted: " << bad;
  }
}

}  // namespace
}  // namespace reprise::testing
