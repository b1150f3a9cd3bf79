// Graphviz: SVG through the `dot` program where it is installed, dot's own message when it rejects
// the input, and a clear error where it is not on PATH.
#include "src/util/graphviz.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/dump_test_util.h"

namespace reprise::util {
namespace {

using ::reprise::testing::ScopedEnv;
using ::testing::HasSubstr;

#define REPRISE_REQUIRE_DOT()                                                      \
  do {                                                                             \
    if (FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not on PATH"; \
  } while (false)

TEST(GraphvizTest, RendersDotToSvg) {
  REPRISE_REQUIRE_DOT();
  auto svg = RenderSvg("digraph g { a -> b [label=\"f32[2, 3]\"]; }\n");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("<svg"));
  EXPECT_THAT(*svg, HasSubstr("f32[2, 3]"));
}

TEST(GraphvizTest, RendersInputLargerThanAPipeBuffer) {
  REPRISE_REQUIRE_DOT();
  std::string dot = "digraph g {\n";
  for (int i = 0; i < 3000; ++i) dot += "  n" + std::to_string(i) + " [label=\"node\"];\n";
  dot += "}\n";
  auto svg = RenderSvg(dot);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("n2999"));
}

TEST(GraphvizTest, InvalidDotFailsWithDotsOwnMessage) {
  REPRISE_REQUIRE_DOT();
  auto svg = RenderSvg("digraph {\n");
  EXPECT_EQ(svg.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(svg.status().message(), HasSubstr("syntax error"));
}

TEST(GraphvizTest, WithoutDotOnPathSvgIsAClearError) {
  ScopedEnv path("PATH", "/nonexistent-reprise-test-dir");
  EXPECT_EQ(FindDotProgram(), "");
  const absl::Status available = CheckDotAvailable();
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(available.message(), "Graphviz 'dot' not found on PATH; use --format dot");
  EXPECT_EQ(RenderSvg("digraph g {}").status(), available);
}

}  // namespace
}  // namespace reprise::util
