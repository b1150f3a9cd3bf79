// The model builders: a configuration whose counts wrap is refused naming the value, and a model
// that fails halfway leaves the graph it was added to as it was.
#include "reprise/models.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ModelsTest, BuildMlpRefusesAnInputWhoseCountWraps) {
  const auto mlp =
      models::BuildMlp({.batch = int64_t{1} << 32, .input_features = int64_t{1} << 32});
  EXPECT_EQ(mlp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mlp.status().message(),
              AllOf(HasSubstr("features"), HasSubstr("[4294967296, 4294967296]")));
}

TEST(ModelsTest, BuildMlpRefusesAHiddenLayerWhoseCountWraps) {
  const auto mlp =
      models::BuildMlp({.batch = int64_t{1} << 40, .input_features = 1, .width = int64_t{1} << 30});
  EXPECT_EQ(mlp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mlp.status().message(), HasSubstr("fc0"));
}

TEST(ModelsTest, AddMlpThatFailsLeavesTheGraphAsItWasAndARetrySucceeds) {
  Graph g;
  ASSERT_TRUE(g.AddInput("other", {Shape{2}}).ok());
  const std::string before = g.ToString();
  // fc0 fits; its output [2^40, 2^30] does not: features, labels and fc0.weight were added first.
  const auto bad = models::AddMlp(
      g, {.batch = int64_t{1} << 40, .input_features = 1, .depth = 2, .width = int64_t{1} << 30},
      "a.");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.ToString(), before);
  EXPECT_TRUE(g.NodesOf("parameter").empty());

  const auto good = models::AddMlp(
      g, {.batch = 4, .input_features = 3, .depth = 1, .width = 5, .classes = 2}, "a.");
  ASSERT_TRUE(good.ok()) << good.status();
  std::vector<std::string> params;
  for (int32_t id : g.NodesOf("parameter")) params.push_back(g.node(id).name);
  EXPECT_EQ(params,
            (std::vector<std::string>{"a.fc0.weight", "a.fc0.bias", "a.fc1.weight", "a.fc1.bias"}));
}

TEST(ModelsTest, EnsembleThatFailsAtALaterModelLeavesNoEarlierModel) {
  Graph g;
  const models::MlpConfig config{
      .batch = 2, .input_features = 3, .depth = 1, .width = 4, .classes = 2};
  const auto losses = models::Ensemble(
      g, 3, [&](Graph& graph, absl::string_view prefix, int k) -> absl::StatusOr<Value> {
        if (k == 2) return absl::InvalidArgumentError("model 2 is refused");
        auto mlp = models::AddMlp(graph, config, prefix);
        if (!mlp.ok()) return mlp.status();
        return mlp->loss;
      });
  EXPECT_EQ(losses.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.num_nodes(), 0);
}

}  // namespace
}  // namespace reprise
