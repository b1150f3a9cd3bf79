// The dense layer builders: shapes whose element counts would wrap are refused naming the layer,
// and a builder that fails halfway leaves the graph as it was.
#include "reprise/nn.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::string> ParameterNames(const Graph& g) {
  std::vector<std::string> names;
  for (int32_t id : g.NodesOf("parameter")) names.push_back(g.node(id).name);
  return names;
}

TEST(NnTest, LinearWhoseOutputCountWrapsIsRefusedAndLeavesNothing) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{int64_t{1} << 40, 1}});
  const int before = g.num_nodes();
  // The weight [2^30, 1] fits; the output [2^40, 2^30] does not.
  const auto y = nn::Linear(g, x, int64_t{1} << 30, "fc");
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(),
              AllOf(HasSubstr("fc.matmul"), HasSubstr("[1099511627776, 1073741824]")));
  EXPECT_EQ(g.num_nodes(), before);
  EXPECT_TRUE(ParameterNames(g).empty());
  EXPECT_FALSE(g.FindNode("fc.weight").ok());

  // A retry under the same name succeeds, with exactly its own parameters.
  const auto retry = nn::Linear(g, x, 8, "fc");
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(ParameterNames(g), (std::vector<std::string>{"fc.weight", "fc.bias"}));
}

TEST(NnTest, LinearFailingAtItsLastNodeRollsBackTheFirstOnes) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4, 3}});
  ASSERT_TRUE(g.AddInput("fc.bias", {Shape{2}}).ok());  // Takes the bias's name.
  const Graph before = g;
  const auto y = nn::Linear(g, x, 2, "fc");
  EXPECT_EQ(y.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(y.status().message(), HasSubstr("fc.bias"));
  EXPECT_EQ(g.ToString(), before.ToString());
  EXPECT_FALSE(g.FindNode("fc.weight").ok());
  EXPECT_FALSE(g.FindNode("fc.matmul").ok());
  // Without the bias nothing clashes: the names the failed build used are free again.
  ASSERT_TRUE(nn::Linear(g, x, 2, "fc", /*bias=*/false).ok());
  EXPECT_EQ(ParameterNames(g), std::vector<std::string>{"fc.weight"});
}

TEST(NnTest, DropoutFailingLeavesNoStepCounter) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4, 3}});
  ASSERT_TRUE(g.AddInput("drop", {Shape{1}}).ok());  // Takes the layer's name.
  const int before = g.num_nodes();
  EXPECT_EQ(nn::Dropout(g, x, 0.5, "drop").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(g.num_nodes(), before);  // The "rng.step" state it added first is gone.
}

}  // namespace
}  // namespace reprise
