// DOT dumps of the small MLP: labels carry name, op and shapes; data edges carry shapes, control
// edges are dashed; the plan's launches sit in lane clusters and fused nodes stand out and list
// what they replaced; and Graphviz accepts every one of them (where it is installed).
#include "src/passes/dump_dot.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/util/graphviz.h"
#include "tests/cpu/dump_test_util.h"

namespace reprise::passes {
namespace {

using ::reprise::testing::MlpStages;
using ::reprise::testing::SmallMlpStages;
using ::testing::HasSubstr;

TEST(DumpDotTest, QuotesEscapeQuotesBackslashesAndLineBreaks) {
  EXPECT_EQ(DotQuote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(DotQuote("f32[32, 8]"), "\"f32[32, 8]\"");
}

TEST(DumpDotTest, NodesShowNameOpAndShapesAndDataEdgesShowShapes) {
  const MlpStages s = SmallMlpStages();
  const Graph& g = s.mlp.graph;
  const std::string dot = GraphToDot(g);
  const int32_t matmul = *g.FindNode("fc0.matmul");
  const int32_t features = *g.FindNode("features");
  EXPECT_THAT(dot,
              HasSubstr(absl::StrCat("n", matmul, " [label=\"fc0.matmul\\nmatmul\\nf32[32, 8]\"")));
  EXPECT_THAT(dot,
              HasSubstr(absl::StrCat("n", features, " -> n", matmul, " [label=\"f32[32, 8]\"]")));
  EXPECT_THAT(dot, HasSubstr("shape=ellipse"));  // Leaves.
}

TEST(DumpDotTest, ControlEdgesAreDashed) {
  const MlpStages s = SmallMlpStages();
  const Graph& g = s.training.graph;
  const std::string dot = GraphToDot(g);
  int control_edges = 0;
  for (const Node& n : g.nodes()) {
    for (int32_t before : n.control_inputs) {
      ++control_edges;
      EXPECT_THAT(dot, HasSubstr(absl::StrCat("n", before, " -> n", n.id, " [style=dashed")));
    }
  }
  EXPECT_GT(control_edges, 0);  // Each SGD update waits for the other readers of its weight.
}

TEST(DumpDotTest, PlanPutsLaunchesInLaneClustersAndMarksFusedNodes) {
  const MlpStages s = SmallMlpStages(/*fuse=*/true);
  const std::string dot = PlanToDot(s.plan);
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_lane0 {"));
  for (const ScheduledLaunch& launch : s.plan.launches) {
    EXPECT_THAT(dot, HasSubstr(absl::StrCat("subgraph cluster_lane", launch.lane, " {")));
  }
  const int32_t fused = *s.plan.graph().FindNode("fc0.matmul+bias+relu");
  const size_t at = dot.find(absl::StrCat("    n", fused, " [label="));
  ASSERT_NE(at, std::string::npos);
  const std::string statement = dot.substr(at, dot.find('\n', at) - at);
  EXPECT_THAT(statement, HasSubstr("fillcolor=\"#fdba74\""));
  EXPECT_THAT(statement, HasSubstr("tooltip=\"fuses fc0.matmul, fc0.bias_add, fc0.relu\""));
  EXPECT_THAT(statement, HasSubstr("fuses:\\nfc0.matmul, fc0.bias_add, fc0.relu"));
  EXPECT_THAT(dot, HasSubstr("copy_inputs [label="));
}

TEST(DumpDotTest, UnfusedPlanHasNoFusedColour) {
  const MlpStages s = SmallMlpStages(/*fuse=*/false);
  EXPECT_THAT(PlanToDot(s.plan), ::testing::Not(HasSubstr("#fdba74")));
}

TEST(DumpDotTest, GraphvizAcceptsEveryStage) {
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not on PATH";
  const MlpStages fused = SmallMlpStages(/*fuse=*/true);
  const MlpStages unfused = SmallMlpStages(/*fuse=*/false);
  const std::pair<const char*, std::string> dumps[] = {
      {"ir", GraphToDot(fused.mlp.graph)},
      {"training", GraphToDot(fused.training.graph)},
      {"plan", PlanToDot(fused.plan)},
      {"unfused plan", PlanToDot(unfused.plan)}};
  for (const auto& [stage, dot] : dumps) {
    SCOPED_TRACE(stage);
    auto svg = util::RenderSvg(dot);
    ASSERT_TRUE(svg.ok()) << svg.status();
    EXPECT_THAT(*svg, HasSubstr("<svg"));
  }
}

}  // namespace
}  // namespace reprise::passes
