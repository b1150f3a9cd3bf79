// ReplaceGroups refuses groups it cannot place or that would lose a value someone reads.
#include "src/passes/rewrite.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// x -> relu a -> relu b -> add(b, a) c; a is read outside any {a, b} group.
struct Chain {
  Graph g;
  Value x, a, b, c;
  Chain() {
    x = *g.AddInput("x", {Shape{4}});
    a = *g.AddOp1(ops::ReluOp(), "a", {x});
    b = *g.AddOp1(ops::ReluOp(), "b", {a});
    c = *g.AddOp1(ops::AddOp(), "c", {b, a});
  }
};

passes::NodeGroup Relus(const Chain& chain, std::vector<Value> outputs) {
  return {.members = {chain.a.node, chain.b.node},
          .op = &ops::ReluOp(),
          .name = "ab",
          .inputs = {chain.x},
          .outputs = std::move(outputs)};
}

TEST(RewriteTest, ValueReadOutsideMustBeAnOutput) {
  Chain chain;
  auto out = passes::ReplaceGroups(chain.g, {Relus(chain, {chain.b})}, {});
  EXPECT_THAT(out.status().message(), HasSubstr("output 0 of 'a' is needed outside"));
}

TEST(RewriteTest, OverlappingGroupsAreRefused) {
  Chain chain;
  passes::NodeGroup one = Relus(chain, {chain.b});
  one.members = {chain.b.node};
  passes::NodeGroup two = one;
  two.name = "again";
  auto out = passes::ReplaceGroups(chain.g, {one, two}, {});
  EXPECT_THAT(out.status().message(), HasSubstr("is in two fused groups"));
}

TEST(RewriteTest, GroupAroundANodeThatReadsAMemberIsNotPlaceable) {
  Chain chain;
  const passes::Consumers consumers(chain.g);
  EXPECT_FALSE(passes::Placeable(chain.g, consumers, {chain.a.node, chain.c.node}));
  EXPECT_TRUE(passes::Placeable(chain.g, consumers, {chain.b.node, chain.c.node}));
}

// x -> relu a -> relu b (reads a) and relu d (reads x) -> add(d, a) e: a group {a, e} around b
// and d sinks b (it reads member a); d stays where it is.
TEST(RewriteTest, SinkingGroupMovesTheReadersBetweenItsMembersAfterIt) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4}});
  const Value a = *g.AddOp1(ops::ReluOp(), "a", {x});
  const Value b = *g.AddOp1(ops::ReluOp(), "b", {a});
  const Value d = *g.AddOp1(ops::ReluOp(), "d", {x});
  const Value e = *g.AddOp1(ops::AddOp(), "e", {d, a});
  const passes::Consumers consumers(g);
  EXPECT_FALSE(passes::Placeable(g, consumers, {a.node, e.node}));
  const auto sunk = passes::SunkReaders(g, consumers, {a.node, e.node});
  ASSERT_TRUE(sunk.has_value());
  EXPECT_EQ(*sunk, std::vector<int32_t>{b.node});
  // A member reading the node it would sink (e = add(b, a)) would wait for itself.
  Graph cyclic;
  const Value cx = *cyclic.AddInput("x", {Shape{4}});
  const Value ca = *cyclic.AddOp1(ops::ReluOp(), "a", {cx});
  const Value cb = *cyclic.AddOp1(ops::ReluOp(), "b", {ca});
  const Value ce = *cyclic.AddOp1(ops::AddOp(), "e", {cb, ca});
  EXPECT_FALSE(
      passes::SunkReaders(cyclic, passes::Consumers(cyclic), {ca.node, ce.node}).has_value());
}

TEST(RewriteTest, SunkReaderRunsAfterTheGroupNode) {
  // x -> relu a -> relu b (reads a); relu c (reads x); group {a, c} as one relu of x standing for
  // c, with a also an output: b moves after it.
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4}});
  const Value a = *g.AddOp1(ops::ReluOp(), "a", {x});
  const Value b = *g.AddOp1(ops::ReluOp(), "b", {a});
  const Value c = *g.AddOp1(ops::ReluOp(), "c", {x});
  passes::NodeGroup group{.members = {a.node, c.node},
                          .op = &ops::ReluOp(),
                          .name = "ac",
                          .inputs = {x},
                          .outputs = {a}};
  group.sink_readers = true;
  // c's value is read by nobody, so only a is an output.
  auto out = passes::ReplaceGroups(g, {group}, {b});
  ASSERT_TRUE(out.ok()) << out.status();
  const int32_t group_node = out->nodes.at(a.node), moved = out->nodes.at(b.node);
  EXPECT_EQ(out->nodes.at(c.node), group_node);
  EXPECT_GT(moved, group_node);
  EXPECT_EQ(out->graph.node(moved).name, "b");
  group.sink_readers = false;
  EXPECT_FALSE(passes::ReplaceGroups(g, {group}, {b}).ok());  // Not placeable without sinking.
}

TEST(RewriteTest, ReplacedGroupKeepsNamesAndMapsValues) {
  Chain chain;
  passes::NodeGroup group{.members = {chain.b.node, chain.c.node},
                          .op = &ops::AddOp(),
                          .name = "bc",
                          .inputs = {chain.a, chain.a},
                          .outputs = {chain.c}};
  auto out = passes::ReplaceGroups(chain.g, {group}, {chain.c});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->graph.num_nodes(), 3);
  const Value c = out->values.at(chain.c);
  EXPECT_EQ(out->graph.node(c.node).name, "bc");
  EXPECT_EQ(std::get<std::string>(out->graph.node(c.node).attrs.at("fused_nodes")), "b,c");
  EXPECT_FALSE(out->values.contains(chain.b));
  EXPECT_EQ(out->nodes.at(chain.b.node), c.node);
}

}  // namespace
}  // namespace reprise
