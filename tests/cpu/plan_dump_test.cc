// Dumps of the small MLP at each host-side stage in each format: text is the existing text output,
// JSON and DOT are what dump_json and dump_dot write, SVG is Graphviz's; unknown formats and SVG
// without Graphviz are clear errors.
#include "src/passes/plan_dump.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/passes/dump_dot.h"
#include "src/passes/dump_json.h"
#include "src/util/graphviz.h"
#include "tests/cpu/dump_test_util.h"
#include "tests/cpu/json_reader.h"

namespace reprise::passes {
namespace {

using ::reprise::testing::MlpStages;
using ::reprise::testing::ScopedEnv;
using ::reprise::testing::SmallMlpStages;
using ::testing::HasSubstr;

TEST(PlanDumpTest, ParsesEveryFormatByName) {
  for (DumpFormat f : {DumpFormat::kText, DumpFormat::kJson, DumpFormat::kDot, DumpFormat::kSvg}) {
    auto parsed = ParseDumpFormat(DumpFormatName(f));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, f);
  }
}

TEST(PlanDumpTest, UnknownFormatNamesItAndTheChoices) {
  auto parsed = ParseDumpFormat("yaml");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("--format 'yaml'"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("text, json, dot or svg"));
}

TEST(PlanDumpTest, TextIsTheExistingTextOutput) {
  const MlpStages s = SmallMlpStages();
  EXPECT_EQ(*DumpForward(s.mlp.graph, s.mlp.loss, DumpFormat::kText), s.mlp.graph.ToString());
  EXPECT_EQ(*DumpTraining(s.training, DumpFormat::kText), s.training.graph.ToString());
  EXPECT_EQ(*DumpPlan(s.plan, DumpFormat::kText), PlanToString(s.plan));
  EXPECT_THAT(*DumpPlan(s.plan, DumpFormat::kText),
              HasSubstr("[fuses fc0.matmul,fc0.bias_add,fc0.relu]"));
}

TEST(PlanDumpTest, JsonAndDotAreTheDumpersOutput) {
  const MlpStages s = SmallMlpStages();
  EXPECT_EQ(*DumpForward(s.mlp.graph, s.mlp.loss, DumpFormat::kJson),
            ForwardToJson(s.mlp.graph, s.mlp.loss));
  EXPECT_EQ(*DumpTraining(s.training, DumpFormat::kJson), TrainingToJson(s.training));
  EXPECT_EQ(*DumpPlan(s.plan, DumpFormat::kJson), PlanToJson(s.plan));
  EXPECT_EQ(*DumpForward(s.mlp.graph, s.mlp.loss, DumpFormat::kDot), GraphToDot(s.mlp.graph));
  EXPECT_EQ(*DumpTraining(s.training, DumpFormat::kDot), GraphToDot(s.training.graph));
  EXPECT_EQ(*DumpPlan(s.plan, DumpFormat::kDot), PlanToDot(s.plan));
  for (const std::string& json :
       {*DumpForward(s.mlp.graph, s.mlp.loss, DumpFormat::kJson),
        *DumpTraining(s.training, DumpFormat::kJson), *DumpPlan(s.plan, DumpFormat::kJson)}) {
    EXPECT_TRUE(testing::ParseJson(json).ok());
  }
}

TEST(PlanDumpTest, SvgIsRenderedByGraphviz) {
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not on PATH";
  const MlpStages s = SmallMlpStages();
  for (const absl::StatusOr<std::string>& svg :
       {DumpForward(s.mlp.graph, s.mlp.loss, DumpFormat::kSvg),
        DumpTraining(s.training, DumpFormat::kSvg), DumpPlan(s.plan, DumpFormat::kSvg)}) {
    ASSERT_TRUE(svg.ok()) << svg.status();
    EXPECT_THAT(*svg, HasSubstr("<svg"));
    EXPECT_THAT(*svg, HasSubstr("fc0.bias"));
  }
}

TEST(PlanDumpTest, SvgWithoutGraphvizIsAClearError) {
  const MlpStages s = SmallMlpStages();
  ScopedEnv path("PATH", "/nonexistent-reprise-test-dir");
  const absl::Status available = CheckFormatAvailable(DumpFormat::kSvg);
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(available.message(), "Graphviz 'dot' not found on PATH; use --format dot");
  EXPECT_EQ(DumpPlan(s.plan, DumpFormat::kSvg).status(), available);
  EXPECT_TRUE(CheckFormatAvailable(DumpFormat::kDot).ok());
}

TEST(PlanDumpTest, FinishDotRefusesFormatsThatAreNotDot) {
  EXPECT_EQ(FinishDot("digraph g {}", DumpFormat::kJson).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*FinishDot("digraph g {}", DumpFormat::kDot), "digraph g {}");
}

TEST(PlanDumpTest, FusedNodeNamesSplitsTheAttribute) {
  Node n;
  EXPECT_TRUE(FusedNodeNames(n).empty());
  n.attrs["fused_nodes"] = std::string("a,b.c,d");
  EXPECT_THAT(FusedNodeNames(n), ::testing::ElementsAre("a", "b.c", "d"));
  n.attrs["fused_nodes"] = int64_t{3};  // Not a list of names.
  EXPECT_TRUE(FusedNodeNames(n).empty());
}

}  // namespace
}  // namespace reprise::passes
