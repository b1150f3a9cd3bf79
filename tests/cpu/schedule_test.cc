// The schedule's lanes: weight gradients, optimizer updates, what only weight gradients read and
// what reads only them on lane 1, and with three or more lanes the side branches off the critical
// path on lanes of their own, with waits that order every dependency across lanes.
#include "src/passes/schedule.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/passes/mixed_precision.h"

namespace reprise {
namespace {

autodiff::TrainingGraph ResNet18() {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .classes = 3, .image_size = 32});
  EXPECT_TRUE(net.ok()) << net.status();
  return *autodiff::BuildTrainingGraph(net->graph, net->loss, {});
}

int LaneOfNode(const Graph& g, absl::Span<const passes::ScheduledLaunch> order,
               const std::string& name) {
  const int32_t id = *g.FindNode(name);
  for (const passes::ScheduledLaunch& l : order) {
    if (l.node == id) return l.lane;
  }
  return -1;
}

// Every dependency between launches on different lanes is covered by a chain of waits.
void ExpectEveryDependencyOrdered(const Graph& g, absl::Span<const passes::ScheduledLaunch> order) {
  std::vector<int> position(g.num_nodes(), -1);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) position[order[i].node] = i;
  const passes::HappensBefore before(order);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const Node& node = g.node(order[i].node);
    for (const Value& v : node.inputs) {
      if (position[v.node] >= 0) {
        EXPECT_TRUE(before(position[v.node], i)) << g.node(v.node).name << " -> " << node.name;
      }
    }
  }
}

TEST(ScheduleTest, ThreeLanesPutTheDownsampleBranchBesideTheMainChain) {
  const autodiff::TrainingGraph t = ResNet18();
  auto order = passes::Schedule(t.graph, {.lanes = 3});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(LaneOfNode(t.graph, *order, "layer2.0.downsample.0.conv"), 2);
  EXPECT_EQ(LaneOfNode(t.graph, *order, "layer2.0.downsample.1"), 2);
  EXPECT_EQ(LaneOfNode(t.graph, *order, "layer2.0.conv1.conv"), 0);
  EXPECT_EQ(LaneOfNode(t.graph, *order, "layer2.0.conv1.conv.wgrad"), 1);
  EXPECT_EQ(LaneOfNode(t.graph, *order, "layer2.0.conv1.conv.dgrad"), 0);
  ExpectEveryDependencyOrdered(t.graph, *order);
}

TEST(ScheduleTest, TwoLanesKeepEverythingButWeightGradientsAndUpdatesOnLaneZero) {
  const autodiff::TrainingGraph t = ResNet18();
  auto order = passes::Schedule(t.graph, {.lanes = 2});
  ASSERT_TRUE(order.ok()) << order.status();
  for (const passes::ScheduledLaunch& l : *order) {
    const Node& node = t.graph.node(l.node);
    const bool side =
        node.op->kind == ir::OpKind::kOptimizer ||
        (node.attrs.contains("role") && std::get<std::string>(node.attrs.at("role")) == "wgrad");
    EXPECT_EQ(l.lane, side ? 1 : 0) << node.name;
  }
  ExpectEveryDependencyOrdered(t.graph, *order);
}

// A value only weight gradients read (a recomputed activation, say) is made on their lane, off
// the data-gradient chain; one that lane 0 also reads stays there.
TEST(ScheduleTest, TwoLanesPutWhatOnlyWeightGradientsReadOnLaneOne) {
  Graph g;
  const TensorSpec spec{Shape{4, 4}, DType::kFloat32};
  const Value x = *g.AddInput("x", spec);
  const Value dy = *g.AddInput("dy", spec);
  const Value only_for_wgrad = *g.AddOp1(ops::ReluOp(), "only_for_wgrad", {x});
  const Value feeds_it = *g.AddOp1(ops::ReluOp(), "feeds_only_for_wgrad", {x});
  const Value twice = *g.AddOp1(ops::AddOp(), "read_by_wgrad_only", {feeds_it, feeds_it});
  const Value shared = *g.AddOp1(ops::ReluOp(), "shared", {x});
  const Attrs wgrad = {
      {"transpose_a", true}, {"transpose_b", false}, {"role", std::string("wgrad")}};
  ASSERT_TRUE(g.AddOp1(ops::MatmulOp(), "w1.wgrad", {only_for_wgrad, dy}, wgrad).ok());
  ASSERT_TRUE(g.AddOp1(ops::MatmulOp(), "w2.wgrad", {twice, dy}, wgrad).ok());
  ASSERT_TRUE(g.AddOp1(ops::MatmulOp(), "w3.wgrad", {shared, dy}, wgrad).ok());
  ASSERT_TRUE(g.AddOp1(ops::ReluOp(), "data_gradient_chain", {shared}).ok());
  auto order = passes::Schedule(g, {.lanes = 2});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(LaneOfNode(g, *order, "only_for_wgrad"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "feeds_only_for_wgrad"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "read_by_wgrad_only"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "w1.wgrad"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "shared"), 0);
  EXPECT_EQ(LaneOfNode(g, *order, "data_gradient_chain"), 0);
  ExpectEveryDependencyOrdered(g, *order);
}

// What reads nothing but a weight gradient's output (its cast back to float32 under mixed
// precision) runs on the weight gradient's lane instead of waiting for it on lane 0; a node that
// also reads a lane-0 value stays on lane 0.
TEST(ScheduleTest, TwoLanesPutWhatReadsOnlyWeightGradientsOnLaneOne) {
  Graph g;
  const TensorSpec spec{Shape{4, 4}, DType::kBFloat16};
  const Value x = *g.AddInput("x", spec);
  const Value dy = *g.AddInput("dy", spec);
  const Attrs wgrad = {
      {"transpose_a", true}, {"transpose_b", false}, {"role", std::string("wgrad")}};
  const Value dw = *g.AddOp1(ops::MatmulOp(), "w.wgrad", {x, dy}, wgrad);
  const Value widened = *g.AddOp1(ops::CastOp(), "w.to_bf16.grad", {dw},
                                  {{"dtype", ops::DTypeAttr(DType::kFloat32)}});
  const Value dx = *g.AddOp1(ops::ReluOp(), "data_gradient", {dy});
  const Value dx32 =
      *g.AddOp1(ops::CastOp(), "dx.to_f32", {dx}, {{"dtype", ops::DTypeAttr(DType::kFloat32)}});
  ASSERT_TRUE(g.AddOp1(ops::AddOp(), "mixed_reader", {widened, dx32}).ok());
  auto order = passes::Schedule(g, {.lanes = 2});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(LaneOfNode(g, *order, "w.wgrad"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "w.to_bf16.grad"), 1);
  EXPECT_EQ(LaneOfNode(g, *order, "data_gradient"), 0);
  EXPECT_EQ(LaneOfNode(g, *order, "mixed_reader"), 0);
  ExpectEveryDependencyOrdered(g, *order);
}

TEST(ScheduleTest, FourLanesOrderEveryDependencyAndTooManyIsAnError) {
  const autodiff::TrainingGraph t = ResNet18();
  auto order = passes::Schedule(t.graph, {.lanes = 4});
  ASSERT_TRUE(order.ok()) << order.status();
  int highest = 0;
  for (const passes::ScheduledLaunch& l : *order) highest = std::max(highest, l.lane);
  EXPECT_EQ(highest, 3);
  ExpectEveryDependencyOrdered(t.graph, *order);
  auto too_many = passes::Schedule(t.graph, {.lanes = 5});
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("1 to 4"), std::string::npos);
}

// A parameter's bias gradient ends its chain as a weight gradient does (role "wgrad"), in float32
// and through mixed precision's cast alike, so it runs on lane 1, off the data-gradient chain; a
// computed bias's gradient flows on into the chain and stays on lane 0.
TEST(ScheduleTest, TwoLanesPutAParametersBiasGradientOnLaneOne) {
  auto mlp =
      models::BuildMlp({.batch = 4, .input_features = 8, .depth = 3, .width = 8, .classes = 3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  for (DType compute : {DType::kFloat32, DType::kBFloat16}) {
    auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, compute);
    ASSERT_TRUE(mixed.ok()) << mixed.status();
    auto t = autodiff::BuildTrainingGraph(mixed->graph, mixed->loss, {});
    ASSERT_TRUE(t.ok()) << t.status();
    auto order = passes::Schedule(t->graph, {.lanes = 2});
    ASSERT_TRUE(order.ok()) << order.status();
    int bias_gradients = 0;
    for (const passes::ScheduledLaunch& l : *order) {
      const Node& node = t->graph.node(l.node);
      if (!absl::EndsWith(node.name, ".bias_grad")) continue;
      ++bias_gradients;
      EXPECT_EQ(l.lane, 1) << node.name << " in " << DTypeName(compute);
    }
    EXPECT_EQ(bias_gradients, 4) << DTypeName(compute);  // Three hidden layers and the output.
    ExpectEveryDependencyOrdered(t->graph, *order);
  }
  Graph g;
  const TensorSpec spec{Shape{4, 4}, DType::kFloat32};
  const Value x = *g.AddInput("x", spec);
  const Value w = *g.AddParameter("w", {Shape{4}}, Initializer::Constant(0.5));
  const Value computed = *g.AddOp1(ops::ReluOp(), "computed_bias", {w});
  const Value y = *g.AddOp1(ops::BiasAddOp(), "y", {x, computed});
  const Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  const Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {y, labels});
  auto t = autodiff::BuildTrainingGraph(g, loss, {});
  ASSERT_TRUE(t.ok()) << t.status();
  const Node& grad = t->graph.node(*t->graph.FindNode("y.bias_grad"));
  EXPECT_FALSE(grad.attrs.contains("role")) << "a computed bias's gradient is not a weight's";
}

// Writes in place keep the id order that the CPU reference runs, with nothing else ordering
// them: an update ready at once (optimizer updates go first among the ready nodes) waits for the
// reader before it, the reader after it waits for it, and the second update of the same weight
// waits for both; on two lanes (the updates on lane 1) through waits.
TEST(ScheduleTest, WritesInPlaceKeepTheirReadersAndWritersInIdOrder) {
  Graph g;
  const TensorSpec vector{Shape{4}, DType::kFloat32}, scalar{Shape{}, DType::kFloat32};
  const Value w = *g.AddParameter("w", vector, Initializer::Constant(0.5));
  const Value grad = *g.AddConstant("g", vector, Initializer::Constant(1));
  const Value velocity = *g.AddState("v", vector, Initializer::Zeros());
  std::vector<Value> shared;
  for (const char* name : {"lr", "momentum", "weight_decay"})
    shared.push_back(*g.AddInput(name, scalar, Initializer::Constant(0.1)));
  auto update = [&](const std::string& name) {
    std::vector<Value> inputs = {w, grad, velocity};
    inputs.insert(inputs.end(), shared.begin(), shared.end());
    ASSERT_TRUE(g.AddOp(ops::SgdMomentumOp(), name, inputs, {}).ok());
  };
  ASSERT_TRUE(g.AddOp1(ops::ReluOp(), "read_before", {w}).ok());
  update("update_1");
  ASSERT_TRUE(g.AddOp1(ops::ReluOp(), "read_between", {w}).ok());
  update("update_2");
  ASSERT_TRUE(g.AddOp1(ops::ReluOp(), "read_after", {w}).ok());
  const std::vector<std::string> id_order = {"read_before", "update_1", "read_between", "update_2",
                                             "read_after"};
  for (int lanes : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(lanes, " lanes"));
    auto order = passes::Schedule(g, {.lanes = lanes});
    ASSERT_TRUE(order.ok()) << order.status();
    ASSERT_EQ(order->size(), id_order.size());
    if (lanes == 2) EXPECT_EQ(LaneOfNode(g, *order, "update_1"), 1);
    std::vector<int> position(g.num_nodes(), -1);
    for (int i = 0; i < static_cast<int>(order->size()); ++i) position[(*order)[i].node] = i;
    const passes::HappensBefore before(*order);
    for (size_t i = 0; i + 1 < id_order.size(); ++i) {
      const int a = position[*g.FindNode(id_order[i])], b = position[*g.FindNode(id_order[i + 1])];
      EXPECT_TRUE(before(a, b)) << id_order[i] << " before " << id_order[i + 1];
    }
  }
}

}  // namespace
}  // namespace reprise
