// The mixed-precision pass: a ResNet computes in bfloat16 with float32 master weights, batch-norm
// statistics and loss, keeps its names and bindings, and trains on the CPU reference about as the
// float32 network does.
#include "src/passes/mixed_precision.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "src/passes/channels_last.h"
#include "src/passes/plan.h"

namespace reprise {
namespace {

models::ResNet SmallResNet() {
  auto net = models::BuildResNet({.depth = 18, .batch = 4, .classes = 3, .image_size = 32});
  EXPECT_TRUE(net.ok()) << net.status();
  return *std::move(net);
}

TEST(MixedPrecisionTest, ComputeIsBFloat16AndWeightsStayFloat32) {
  const models::ResNet net = SmallResNet();
  auto mixed = passes::ConvertToMixedPrecision(net.graph, net.loss, {net.logits}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const Graph& g = mixed->graph;
  for (const Node& n : g.nodes()) {
    if (n.op == &ops::Conv2dOp() || n.op == &ops::MatmulOp()) {
      for (const Value& v : n.inputs) EXPECT_EQ(g.spec(v).dtype, DType::kBFloat16) << n.name;
    }
    if (n.op == &ops::SoftmaxCrossEntropyOp()) {  // 16-bit logits, a float32 loss.
      EXPECT_EQ(g.spec(n.inputs[0]).dtype, DType::kBFloat16);
      EXPECT_EQ(n.outputs[0].dtype, DType::kFloat32);
    }
  }
  for (int32_t id : net.graph.NodesOf("parameter")) {
    const Node& old = net.graph.node(id);
    auto found = g.FindNode(old.name);
    ASSERT_TRUE(found.ok()) << old.name;
    EXPECT_EQ(g.node(*found).outputs[0], old.outputs[0]) << old.name;  // f32, same shape.
  }
  EXPECT_EQ(g.node(*g.FindNode("images")).outputs[0].dtype, DType::kFloat32);
  // 20 convolution weights, the fc weight and bias, the images, and the kept logits back to f32
  // (the loss reads the bfloat16 logits).
  EXPECT_EQ(mixed->casts, 24);
  EXPECT_EQ(g.spec(mixed->kept[0]).dtype, DType::kFloat32);
  EXPECT_EQ(g.spec(mixed->loss).dtype, DType::kFloat32);
}

TEST(MixedPrecisionTest, Float32IsUnchangedAndOtherTypesAreErrors) {
  const models::ResNet net = SmallResNet();
  auto same = passes::ConvertToMixedPrecision(net.graph, net.loss, {}, DType::kFloat32);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->graph.ToString(), net.graph.ToString());
  auto bad = passes::ConvertToMixedPrecision(net.graph, net.loss, {}, DType::kInt32);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// Losses of four SGD steps on one fixed batch, on the CPU reference.
std::vector<float> Losses(const Graph& g, Value loss) {
  auto t = autodiff::BuildTrainingGraph(g, loss, {.learning_rate = 0.01f});
  EXPECT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor cpu(t->graph, /*float64=*/false, 3);
  std::mt19937 rng(1);
  std::normal_distribution<double> normal;
  std::vector<double> x(4 * 3 * 32 * 32);
  for (double& v : x) v = normal(rng);
  EXPECT_TRUE(cpu.SetLeaf("images", x).ok());
  EXPECT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{0, 1, 2, 1}).ok());
  std::vector<float> losses;
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(cpu.Run().ok());
    losses.push_back((*cpu.Tensor(t->loss))->data<float>()[0]);
  }
  return losses;
}

TEST(MixedPrecisionTest, BFloat16TrainingFollowsFloat32OnTheCpuReference) {
  const models::ResNet net = SmallResNet();
  auto mixed = passes::ConvertToMixedPrecision(net.graph, net.loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const std::vector<float> f32 = Losses(net.graph, net.loss);
  const std::vector<float> bf16 = Losses(mixed->graph, mixed->loss);
  // bfloat16 keeps 8 bits of mantissa; through 18 layers whose batch norms see 4 samples at 1×1
  // in the last stage, ReLU inputs near zero change sign, so the losses agree only roughly.
  EXPECT_NEAR(bf16[0], f32[0], 0.1 * f32[0]) << ::testing::PrintToString(f32);
  EXPECT_LT(bf16.back(), 0.5f * bf16.front()) << ::testing::PrintToString(bf16);
}

// A shallow network, where bfloat16's rounding is the only difference: losses agree closely.
TEST(MixedPrecisionTest, BFloat16MlpLossAgreesWithFloat32) {
  auto mlp =
      models::BuildMlp({.batch = 16, .input_features = 32, .depth = 2, .width = 64, .classes = 5});
  ASSERT_TRUE(mlp.ok());
  auto mixed =
      passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {mlp->logits}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto loss_of = [](const Graph& g, Value loss) {
    ir::ReferenceExecutor cpu(g, false, 4);
    std::mt19937 rng(2);
    std::normal_distribution<double> normal;
    std::vector<double> x(16 * 32);
    for (double& v : x) v = normal(rng);
    EXPECT_TRUE(cpu.SetLeaf("features", x).ok());
    std::vector<int32_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[i] = i % 5;
    EXPECT_TRUE(cpu.SetLeaf("labels", labels).ok());
    EXPECT_TRUE(cpu.Run().ok());
    return (*cpu.Tensor(loss))->data<float>()[0];
  };
  const float f32 = loss_of(mlp->graph, mlp->loss);
  const float bf16 = loss_of(mixed->graph, mixed->loss);
  EXPECT_NE(bf16, f32);                // Rounded, so not the same bits...
  EXPECT_NEAR(bf16, f32, 1e-2 * f32);  // ...but close.
}

}  // namespace
}  // namespace reprise

namespace reprise {
namespace {

// Every launch of a 16-bit ResNet's plan, as Trainer::Create builds it (channels-last inside,
// mixed precision, autodiff with float16's loss scaling, fusion), has a GPU lowering for its
// 16-bit tensors: nothing is refused at Create for want of one.
TEST(MixedPrecisionTest, EveryLaunchOfASixteenBitResNetPlanHasALowering) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << LayoutName(layout));
      auto net = models::BuildResNet(
          {.depth = 18, .batch = 4, .classes = 3, .image_size = 32, .layout = layout});
      ASSERT_TRUE(net.ok()) << net.status();
      auto inside = passes::ApplyChannelsLast(net->graph, net->loss, {}, ChannelsLast::kAuto);
      ASSERT_TRUE(inside.ok()) << inside.status();
      auto mixed =
          passes::ConvertToMixedPrecision(inside->graph, inside->loss, inside->kept, dtype);
      ASSERT_TRUE(mixed.ok()) << mixed.status();
      auto training =
          autodiff::BuildTrainingGraphWith(mixed->graph, mixed->loss, autodiff::FromSgd({}),
                                           autodiff::ResolveLossScaling({}, dtype));
      ASSERT_TRUE(training.ok()) << training.status();
      auto plan = passes::BuildPlan(*std::move(training), {}, {});
      ASSERT_TRUE(plan.ok()) << plan.status();
      const Graph& g = plan->graph();
      int low_launches = 0;
      for (const passes::ScheduledLaunch& launch : plan->launches) {
        const Node& n = g.node(launch.node);
        bool low = false;
        for (const Value& v : n.inputs) low |= g.spec(v).dtype == dtype;
        for (const TensorSpec& out : n.outputs) low |= out.dtype == dtype;
        if (!low) continue;
        ++low_launches;
        EXPECT_TRUE(n.op->low_precision_lowering || n.op->low_precision)
            << "op '" << n.op_name() << "' node '" << n.name << "'";
      }
      EXPECT_GT(low_launches, 50);
      // float16 scales its loss: the scaler's check and update are in the plan.
      EXPECT_EQ(g.FindNode(autodiff::kLossScaleCheck).ok(), dtype == DType::kFloat16);
    }
  }
}

}  // namespace
}  // namespace reprise
