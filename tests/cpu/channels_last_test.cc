// The channels-last pass on the CPU reference: a ResNet-18 training step converted gives the NCHW
// step's loss, parameter updates and running statistics up to reassociation, with the same
// parameter names and shapes and the fewest transposes; graphs with nothing to convert come back
// unchanged; values leaving the region (flatten, fetches) read in NCHW; gradients through the
// converted graph match finite differences.
#include "src/passes/channels_last.h"

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/transpose.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

std::string LayoutOf(const Node& node) {
  auto it = node.attrs.find("layout");
  return it == node.attrs.end() ? "NCHW" : std::get<std::string>(it->second);
}

// name -> spec of every leaf of one kind ("parameter", "state", "input").
std::map<std::string, TensorSpec> Leaves(const Graph& g, absl::string_view kind) {
  std::map<std::string, TensorSpec> out;
  for (int32_t id : g.NodesOf(kind)) out[g.node(id).name] = g.node(id).outputs[0];
  return out;
}

double RelativeL2(absl::Span<const double> a, absl::Span<const double> b) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) err += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
  return std::sqrt(err / std::max(norm, 1e-300));
}

// Two float64 reference training steps of `graph` on fixed data; returns the executor.
std::unique_ptr<ir::ReferenceExecutor> TrainTwoSteps(const autodiff::TrainingGraph& training,
                                                     Value loss, std::vector<double>& losses) {
  auto exec = std::make_unique<ir::ReferenceExecutor>(training.graph, /*float64=*/true, 7);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> images(2 * 3 * 32 * 32);
  for (double& v : images) v = normal(rng);
  EXPECT_TRUE(exec->SetLeaf("images", images).ok());
  EXPECT_TRUE(exec->SetLeaf("labels", std::vector<int32_t>{2, 0}).ok());
  for (int step = 0; step < 2; ++step) {
    EXPECT_TRUE(exec->Run().ok());
    losses.push_back((*exec->Tensor(loss))->data<double>()[0]);
  }
  return exec;
}

TEST(ChannelsLastTest, ResNet18StepMatchesNchwUpToReassociation) {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .classes = 3, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  auto converted = passes::ConvertToChannelsLast(net->graph, net->loss);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const Graph& cg = converted->graph;

  // Same leaves, names and shapes: bindings, GetParameter and weight files do not change.
  EXPECT_EQ(Leaves(cg, "parameter"), Leaves(net->graph, "parameter"));
  EXPECT_EQ(Leaves(cg, "state"), Leaves(net->graph, "state"));
  EXPECT_EQ(Leaves(cg, "input"), Leaves(net->graph, "input"));
  EXPECT_EQ(cg.node(*cg.FindNode("conv1.weight")).outputs[0].shape, (Shape{64, 3, 7, 7}));

  // Every image op runs NHWC under its own name; one transpose per conv weight and one for the
  // images, none back (global_avg_pool's [N, C] is the same in both layouts).
  int convs = 0;
  for (const Node& node : cg.nodes()) {
    if (node.op == &ops::Conv2dOp() || node.op == &ops::MaxPool2dOp() ||
        node.op == &ops::BatchNormTrainOp() || node.op == &ops::GlobalAvgPoolOp()) {
      EXPECT_EQ(LayoutOf(node), "NHWC") << node.name;
      EXPECT_TRUE(net->graph.FindNode(node.name).ok()) << node.name;
    }
    if (node.op == &ops::Conv2dOp()) {
      ++convs;
      const Node& weight = cg.node(node.inputs[1].node);
      EXPECT_EQ(weight.op, &ops::TransposeOp()) << node.name;
      EXPECT_TRUE(absl::EndsWith(weight.name, ".weight.to_nhwc")) << weight.name;
    }
    EXPECT_FALSE(absl::EndsWith(node.name, ".to_nchw")) << node.name;
  }
  EXPECT_EQ(convs, 20);
  EXPECT_EQ(converted->transposes, convs + 1);
  EXPECT_TRUE(cg.FindNode("images.to_nhwc").ok());
  EXPECT_GT(converted->converted_ops, 60);

  const SgdOptions sgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
  auto reference = autodiff::BuildTrainingGraph(net->graph, net->loss, sgd);
  auto channels_last = autodiff::BuildTrainingGraph(cg, converted->loss, sgd);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE(channels_last.ok()) << channels_last.status();
  // A weight's gradient comes back through its transpose's gradient, on the weight-gradient lane.
  const Graph& tg = channels_last->graph;
  auto weight_grad = tg.FindNode("conv1.weight.to_nhwc.grad");
  ASSERT_TRUE(weight_grad.ok()) << weight_grad.status();
  EXPECT_EQ(tg.node(*weight_grad).attrs.at("role"), AttrValue(std::string("wgrad")));
  EXPECT_EQ(tg.node(*weight_grad).outputs[0].shape, (Shape{64, 3, 7, 7}));
  EXPECT_EQ(channels_last->gradients.at(*tg.FindNode("conv1.weight")), (Value{*weight_grad, 0}));
  std::vector<double> reference_losses, channels_last_losses;
  auto a = TrainTwoSteps(*reference, net->loss, reference_losses);
  auto b = TrainTwoSteps(*channels_last, converted->loss, channels_last_losses);
  for (int step = 0; step < 2; ++step) {
    EXPECT_NEAR(channels_last_losses[step], reference_losses[step],
                1e-10 * std::abs(reference_losses[step]))
        << "step " << step;
  }
  // Parameters after two steps (momentum and weight decay included) and running statistics.
  for (absl::string_view kind : {"parameter", "state"}) {
    for (const auto& [name, spec] : Leaves(net->graph, kind)) {
      if (spec.dtype != DType::kFloat32) continue;
      auto want = (*a->Leaf(name))->data<double>();
      auto got = (*b->Leaf(name))->data<double>();
      EXPECT_LT(RelativeL2(got, want), 1e-10) << name;
    }
  }
}

TEST(ChannelsLastTest, NhwcGraphsAndMlpsComeBackUnchanged) {
  auto nhwc =
      models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32, .layout = Layout::kNHWC});
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 8, .depth = 2, .width = 8});
  ASSERT_TRUE(nhwc.ok() && mlp.ok());
  for (const auto& [graph, loss] :
       {std::pair<const Graph*, Value>{&nhwc->graph, nhwc->loss}, {&mlp->graph, mlp->loss}}) {
    EXPECT_FALSE(passes::HasNchwImageOps(*graph));
    auto out = passes::ConvertToChannelsLast(*graph, loss);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->graph.ToString(), graph->ToString());
    EXPECT_EQ(out->transposes, 0);
    EXPECT_EQ(out->converted_ops, 0);
    EXPECT_EQ(out->loss, loss);
    for (const Node& node : graph->nodes()) {
      EXPECT_EQ(*out->map.Map({node.id, 0}), (Value{node.id, 0}));
    }
  }
}

TEST(ChannelsLastTest, PolicyFollowsTheOptions) {
  auto f32 = models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32});
  auto nhwc =
      models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32, .layout = Layout::kNHWC});
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  // Parameters are f32 only: a float64 convolution (a reference check) reads constants.
  Graph f64;
  Value x = *f64.AddInput("x", {Shape{2, 3, 4, 4}, DType::kFloat64});
  Value w = *f64.AddConstant("w", {Shape{2, 3, 1, 1}, DType::kFloat64}, Initializer::Constant(1));
  ASSERT_TRUE(f64.AddOp1(ops::Conv2dOp(), "conv", {x, w}).ok());
  ASSERT_TRUE(passes::HasNchwImageOps(f64));
  using passes::WantsChannelsLast;
  EXPECT_TRUE(WantsChannelsLast(f32->graph, ChannelsLast::kAuto));
  EXPECT_FALSE(WantsChannelsLast(f32->graph, ChannelsLast::kOff));
  EXPECT_FALSE(WantsChannelsLast(f64, ChannelsLast::kAuto));
  EXPECT_TRUE(WantsChannelsLast(f64, ChannelsLast::kOn));
  EXPECT_FALSE(WantsChannelsLast(nhwc->graph, ChannelsLast::kOn));
  auto off = passes::ApplyChannelsLast(f32->graph, f32->loss, {}, ChannelsLast::kOff);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->graph.ToString(), f32->graph.ToString());
}

// images -> conv (NCHW, bias) -> relu -> flatten -> linear -> loss, with the relu output kept.
struct FlattenNet {
  Graph g;
  Value relu, flat, loss;
};
FlattenNet BuildFlattenNet() {
  FlattenNet net;
  Value images = *net.g.AddInput("images", {Shape{2, 3, 5, 5}});
  Value conv = *nn::Conv2d(net.g, images, 4, "conv", {.kernel = 3, .padding = 1, .bias = true});
  net.relu = *nn::Relu(net.g, conv, "relu");
  net.flat = *nn::Flatten(net.g, net.relu, "flatten");
  Value logits = *nn::Linear(net.g, net.flat, 3, "fc");
  Value labels = *net.g.AddInput("labels", {Shape{2}, DType::kInt32});
  net.loss = *nn::SoftmaxCrossEntropy(net.g, logits, labels, "loss");
  return net;
}

TEST(ChannelsLastTest, FlattenAndKeptValuesReadNchw) {
  FlattenNet net = BuildFlattenNet();
  auto out = passes::ConvertToChannelsLast(net.g, net.loss, {net.relu});
  ASSERT_TRUE(out.ok()) << out.status();
  const Graph& cg = out->graph;
  // The flatten reads the relu transposed back, once; the kept relu is that same NCHW copy.
  const Node& flatten = cg.node(*cg.FindNode("flatten"));
  const Node& back = cg.node(flatten.inputs[0].node);
  EXPECT_EQ(back.name, "relu.to_nchw");
  EXPECT_EQ(back.op, &ops::TransposeOp());
  ASSERT_EQ(out->kept.size(), 1u);
  EXPECT_EQ(out->kept[0], flatten.inputs[0]);
  EXPECT_EQ(*out->map.Map(net.relu), flatten.inputs[0]);
  EXPECT_EQ(out->transposes, 3);  // images, conv.weight, relu back.
  EXPECT_EQ(cg.spec(out->map.nhwc.at(net.relu)).shape, (Shape{2, 5, 5, 4}));

  ir::ReferenceExecutor a(net.g, /*float64=*/true, 5), b(cg, /*float64=*/true, 5);
  std::mt19937 rng(9);
  std::normal_distribution<double> normal;
  std::vector<double> images(2 * 3 * 5 * 5);
  for (double& v : images) v = normal(rng);
  for (ir::ReferenceExecutor* e : {&a, &b}) {
    ASSERT_TRUE(e->SetLeaf("images", images).ok());
    ASSERT_TRUE(e->SetLeaf("labels", std::vector<int32_t>{1, 2}).ok());
    ASSERT_TRUE(e->Run().ok());
  }
  for (const auto& [before, after] :
       {std::pair{net.flat, *out->map.Map(net.flat)}, {net.relu, out->kept[0]}}) {
    auto want = (*a.Tensor(before))->data<double>();
    auto got = (*b.Tensor(after))->data<double>();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(RelativeL2(got, want), 1e-14);
  }
}

TEST(ChannelsLastTest, ValuesOnlyChannelsLastAreClearErrors) {
  FlattenNet net = BuildFlattenNet();
  auto out = passes::ConvertToChannelsLast(net.g, net.loss);
  ASSERT_TRUE(out.ok()) << out.status();
  const Value conv_out = net.g.node(net.relu.node).inputs[0];  // The bias add, NHWC only.
  auto missing = out->map.Map(conv_out);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("TrainOptions::fetch"));
  auto bogus = out->map.Map(Value{net.g.num_nodes() + 5, 0});
  EXPECT_EQ(bogus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(passes::ConvertToChannelsLast(net.g, Value{999, 0}).ok());
}

TEST(ChannelsLastTest, NewNodesGiveWayToUserNames) {
  Graph g;
  Value images = *g.AddInput("images", {Shape{1, 2, 4, 4}});
  ASSERT_TRUE(g.AddConstant("images.to_nhwc", {Shape{1}}, Initializer::Zeros()).ok());
  Value y = *nn::Conv2d(g, images, 2, "conv", {.kernel = 1});
  Value pooled = *nn::GlobalAvgPool(g, y, "gap");
  Value labels = *g.AddInput("labels", {Shape{1}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, pooled, labels, "loss");
  auto out = passes::ConvertToChannelsLast(g, loss);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->graph.node(*out->graph.FindNode("images.to_nhwc")).op, &ir::ConstantOp());
  EXPECT_EQ(out->graph.node(*out->graph.FindNode("images.to_nhwc_2")).op, &ops::TransposeOp());
}

// conv (bias) -> batch norm -> relu -> max pool, a residual add, global average pool, linear:
// gradients of the converted graph (through the weight and image transposes) against float64
// finite differences.
TEST(ChannelsLastTest, ConvertedGradientsMatchFiniteDifferences) {
  Graph g;
  Value images = *g.AddInput("images", {Shape{3, 2, 5, 5}});
  Value h = *nn::Conv2d(g, images, 3, "conv1",
                        {.kernel = 3, .padding = 1, .bias = true, .weight_bound = 1.0});
  h = *nn::BatchNorm(g, h, "bn1");
  h = *nn::Relu(g, h, "relu1");
  Value skip = h;
  h = *nn::Conv2d(g, h, 3, "conv2", {.kernel = 3, .padding = 1, .weight_bound = 1.0});
  h = *nn::Add(g, h, skip, "add");
  h = *nn::MaxPool2d(g, h, 3, 2, 1, "pool");
  h = *nn::GlobalAvgPool(g, h, "gap");
  Value logits = *nn::Linear(g, h, 3, "fc");
  Value labels = *g.AddInput("labels", {Shape{3}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  auto out = passes::ConvertToChannelsLast(g, loss);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->transposes, 3);
  const Node& add = out->graph.node(*out->graph.FindNode("add"));
  EXPECT_EQ(out->graph.spec(add.inputs[0]).shape, (Shape{3, 5, 5, 3}));  // NHWC operands.
  testing::ExpectGradientsMatchFiniteDifferences(out->graph, out->loss, {0, 2, 1}, 13);
}

}  // namespace
}  // namespace reprise
