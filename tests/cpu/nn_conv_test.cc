// The convolutional layer builders: padding that makes an extent or a count wrap is refused
// naming the layer, and a failed builder leaves the graph as it was.
#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(NnConvTest, HugePaddingIsRefusedNamingTheLayerAndLeavesNoWeight) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{2, 3, 8, 8}});
  const int before = g.num_nodes();
  // Padding 2^40: the output extents fit, their product does not.
  auto y = nn::Conv2d(g, x, 4, "conv1", {.padding = int64_t{1} << 40});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), AllOf(HasSubstr("conv1.conv"), HasSubstr("int64")));
  EXPECT_EQ(g.num_nodes(), before);
  // Padding 2^62: 2 x padding itself wraps.
  y = nn::Conv2d(g, x, 4, "conv1", {.padding = int64_t{1} << 62});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), AllOf(HasSubstr("conv1.conv"), HasSubstr("overflows")));
  EXPECT_EQ(g.num_nodes(), before);
  EXPECT_TRUE(g.NodesOf("parameter").empty());

  const auto retry = nn::Conv2d(g, x, 4, "conv1", {.padding = 1, .bias = true});
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(g.spec(*retry).ToString(), "f32[2, 4, 8, 8]");
  EXPECT_EQ(g.NodesOf("parameter").size(), 2u);
}

TEST(NnConvTest, BatchNormFailingHalfwayLeavesNoParameterOrState) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{2, 3, 4, 4}});
  ASSERT_TRUE(g.AddInput("bn.running_var", {Shape{3}}).ok());  // Taken: the 4th node it adds.
  const int before = g.num_nodes();
  EXPECT_EQ(nn::BatchNorm(g, x, "bn").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(g.num_nodes(), before);
  EXPECT_FALSE(g.FindNode("bn.weight").ok());
  EXPECT_FALSE(g.FindNode("bn.running_mean").ok());
}

TEST(NnConvTest, MaxPoolWithHugePaddingIsRefused) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{1, 1, 4, 4}});
  const auto y = nn::MaxPool2d(g, x, 3, 1, int64_t{1} << 62, "pool");
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), AllOf(HasSubstr("pool"), HasSubstr("padding")));
}

TEST(NnConvTest, BatchNormRefusesNonFiniteOptionsNamingTheValue) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{2, 3, 4, 4}});
  auto y = nn::BatchNorm(g, x, "bn", {.epsilon = std::numeric_limits<double>::quiet_NaN()});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), AllOf(HasSubstr("'bn'"), HasSubstr("epsilon nan")));
  y = nn::BatchNorm(g, x, "bn", {.momentum = 2});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("momentum 2"));
  EXPECT_EQ(g.num_nodes(), 1);
}

}  // namespace
}  // namespace reprise
