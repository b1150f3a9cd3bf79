// Large graph dumps stay usable: a ResNet-50's training graph is drawn as one box per block, fast
// enough to wait for; --filter draws one block in full; a graph too large even by top-level name
// is refused with a message that says how to get a smaller view; the HTML view is one file that
// fetches nothing.
#include "src/tools/dump_view.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/api/model_dump.h"
#include "src/util/graphviz.h"

namespace reprise::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ResNet50Json(const std::string& stage) {
  DumpRequest request;
  request.model = "resnet";
  request.resnet = {.depth = 50, .batch = 2, .classes = 10, .image_size = 64};
  request.stage = stage;
  request.format = "json";
  absl::StatusOr<std::string> json = DumpModel(request);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : "";
}

std::string SmallMlpJson() {
  DumpRequest request;
  request.mlp = {.batch = 4, .input_features = 8, .depth = 2, .width = 8, .classes = 3};
  request.stage = "training";
  request.format = "json";
  return DumpModel(request).value();
}

TEST(DumpViewTest, GroupIsTheLeadingPartsOfTheName) {
  EXPECT_EQ(GroupOf("layer3.2.conv1", 1), "layer3");
  EXPECT_EQ(GroupOf("layer3.2.conv1", 2), "layer3.2");
  EXPECT_EQ(GroupOf("layer3.2.conv1", 3), "layer3.2.conv1");
  EXPECT_EQ(GroupOf("layer3.2.conv1", 7), "layer3.2.conv1");
  EXPECT_EQ(GroupOf("loss", 1), "loss");
}

TEST(DumpViewTest, SmallGraphIsDrawnInFull) {
  absl::StatusOr<DotView> view = DotFromDumpJson(SmallMlpJson(), {.max_nodes = 300});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->collapse_level, 0);
  EXPECT_EQ(view->drawn_nodes, view->graph_nodes);
  EXPECT_TRUE(view->note.empty());
  EXPECT_THAT(view->dot, HasSubstr("fc0.weight"));
}

TEST(DumpViewTest, ResNet50TrainingGraphIsCollapsedIntoBlocks) {
  absl::StatusOr<DotView> view = DotFromDumpJson(ResNet50Json("training"), {.max_nodes = 300});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_GE(view->graph_nodes, 1000);
  EXPECT_GT(view->collapse_level, 0);
  EXPECT_LE(view->drawn_nodes, 300);
  EXPECT_GE(view->drawn_nodes, 16) << "one box per bottleneck block at least";
  EXPECT_THAT(view->dot, HasSubstr("layer3.5"));
  EXPECT_THAT(view->dot, HasSubstr(" -> "));
  EXPECT_THAT(view->note, HasSubstr("--filter"));
  EXPECT_THAT(view->note, HasSubstr("--format html"));
}

// What the 20-minute Graphviz run became: the collapsed ResNet-50 training graph renders in
// seconds (bound: 60 s on a loaded 2-core machine; it takes about a second).
TEST(DumpViewTest, CollapsedResNet50RendersQuickly) {
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not installed";
  absl::StatusOr<DotView> view = DotFromDumpJson(ResNet50Json("training"), {.max_nodes = 300});
  ASSERT_TRUE(view.ok()) << view.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> svg = util::RenderSvg(view->dot);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("<svg"));
  EXPECT_LT(seconds, 60);
}

TEST(DumpViewTest, FilterDrawsOneBlockInFull) {
  const std::string json = ResNet50Json("plan");
  absl::StatusOr<DotView> view = DotFromDumpJson(json, {.max_nodes = 300, .filter = "layer3.2."});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->collapse_level, 0);
  EXPECT_GT(view->drawn_nodes, 3);
  EXPECT_LT(view->drawn_nodes, 300);
  EXPECT_THAT(view->dot, HasSubstr("layer3.2.conv1"));
  EXPECT_THAT(view->dot, Not(HasSubstr("layer3.3.conv1\\n"))) << "only the filtered block";
  EXPECT_THAT(view->dot, HasSubstr("color=grey")) << "its inputs from outside";
}

TEST(DumpViewTest, FilterThatMatchesNothingIsNamed) {
  absl::StatusOr<DotView> view = DotFromDumpJson(SmallMlpJson(), {.filter = "layer9"});
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(view.status().message(), HasSubstr("--filter 'layer9' matches none"));
}

TEST(DumpViewTest, TooManyGroupsIsRefusedSayingHowToGetASmallerView) {
  absl::StatusOr<DotView> view = DotFromDumpJson(ResNet50Json("training"), {.max_nodes = 3});
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(view.status().message(), HasSubstr("more than --max_nodes 3"));
  EXPECT_THAT(view.status().message(), HasSubstr("--filter"));
  EXPECT_THAT(view.status().message(), HasSubstr("--format html"));
}

TEST(DumpViewTest, NotADumpIsRefused) {
  EXPECT_EQ(DotFromDumpJson("{\"a\": 1}", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HtmlFromDumpJson("[1, 2", "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DumpViewTest, HtmlIsSelfContainedAndHoldsEveryNode) {
  const std::string json = ResNet50Json("plan");
  absl::StatusOr<std::string> html = HtmlFromDumpJson(json, "ResNet-50 <plan>");
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_TRUE(absl::StartsWith(*html, "<!DOCTYPE html>"));
  EXPECT_THAT(*html, HasSubstr("ResNet-50 &lt;plan&gt;"));
  EXPECT_THAT(*html, HasSubstr("\"layer4.2.conv3"));
  EXPECT_THAT(*html, Not(HasSubstr("http://")));
  EXPECT_THAT(*html, Not(HasSubstr("https://")));
  EXPECT_THAT(*html, Not(HasSubstr(" src=")));
}

TEST(DumpViewTest, HtmlEscapesAScriptEndInsideTheData) {
  const std::string json =
      R"({"schema": "reprise-dump/1", "stage": "ir", "num_nodes": 1, "nodes": [)"
      R"({"id": 0, "name": "x</script><b>", "op": "input", "inputs": [], "outputs": []}]})";
  absl::StatusOr<std::string> html = HtmlFromDumpJson(json, "t");
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_THAT(*html, HasSubstr("x<\\/script><b>"));
  EXPECT_THAT(*html, Not(HasSubstr("x</script>")));
}

std::filesystem::path SelfDirectory() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

// The tool end to end: the SVG of a ResNet-50 training graph, collapsed, within the bound.
TEST(DumpViewTest, ReprisedumpDrawsResNet50AsSvgWithinAMinute) {
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not installed";
  const std::filesystem::path tool = SelfDirectory() / "reprise-dump";
  ASSERT_TRUE(std::filesystem::exists(tool)) << "cmake/cli.cmake builds it before this test";
  const std::string base =
      (std::filesystem::temp_directory_path() / absl::StrCat("reprise_dump_view_", getpid()))
          .string();
  const std::string command = absl::StrCat(
      "timeout 120 '", tool.string(), "' --model resnet --depth 50 --stage training --format svg",
      " -o '", base, ".svg' 2>'", base, ".err'");
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream err(base + ".err"), svg(base + ".svg");
  std::stringstream err_text, svg_text;
  err_text << err.rdbuf();
  svg_text << svg.rdbuf();
  std::filesystem::remove(base + ".err");
  std::filesystem::remove(base + ".svg");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err_text.str();
  EXPECT_LT(seconds, 60);
  EXPECT_THAT(err_text.str(), HasSubstr("groups by the first"));
  EXPECT_THAT(svg_text.str(), HasSubstr("layer2.3"));
}

}  // namespace
}  // namespace reprise::tools
