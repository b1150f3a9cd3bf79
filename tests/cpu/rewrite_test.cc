// ReplaceGroups refuses groups it cannot place or that would lose a value someone reads (a
// reader in another group reads only that group's inputs).
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

// c reads a, but once c is fused into a group whose inputs are x and b's group output (as a ReLU
// gradient whose mask comes from x stops reading the ReLU output), a need not be an output.
TEST(RewriteTest, ValueReadOnlyByAGroupThatNoLongerReadsItMayGo) {
  Chain chain;
  passes::NodeGroup relus = Relus(chain, {chain.b});
  passes::NodeGroup add{.members = {chain.c.node},
                        .op = &ops::AddOp(),
                        .name = "c_from_x",
                        .inputs = {chain.b, chain.x},
                        .outputs = {chain.c}};
  auto out = passes::ReplaceGroups(chain.g, {relus, add}, {chain.c});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->values.contains(chain.a));
  // A group that still lists a among its inputs needs it.
  add.inputs = {chain.b, chain.a};
  out = passes::ReplaceGroups(chain.g, {relus, add}, {chain.c});
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
