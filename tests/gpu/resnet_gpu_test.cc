// ResNet training on the GPU: graph replay gives the same bits as the bulked run over 50 steps
// (deterministic cuDNN algorithms) and the loss falls, in float32 and in bfloat16 mixed precision
// (TrainOptions::numerics.compute_dtype, whose first loss is float32's within bfloat16 rounding),
// both layouts run, and the first float32 steps match the float64 step.
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/template_images.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

constexpr int kBatch = 8, kSize = 64, kClasses = 4;  // 64: layer4 normalises over 2x2x8 values.

models::ResNetConfig SmallResNet(Layout layout = Layout::kNCHW) {
  return {.depth = 18, .batch = kBatch, .classes = kClasses, .image_size = kSize, .layout = layout};
}

// float32 NCHW runs NCHW, so that the planar batch norm is tested; mixed precision keeps the
// default layout choice.
std::unique_ptr<Trainer> MakeTrainer(const models::ResNet& net, ExecMode mode, bool fuse = true,
                                     int lanes = 0, std::vector<Value> fetch = {},
                                     DType compute = DType::kFloat32) {
  TrainOptions options;
  options.fetch = std::move(fetch);
  options.launch.mode = mode;
  options.kernels.fuse = fuse;
  options.launch.lanes = lanes;
  options.numerics.deterministic = true;
  options.numerics.compute_dtype = compute;
  if (compute == DType::kFloat32) options.kernels.channels_last = ChannelsLast::kOff;
  options.optimizer.learning_rate = 0.005f;
  options.seed = 42;
  auto trainer = Trainer::Create(net.graph, net.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Each class is a fixed random image template under noise.
class Data : public testing::TemplateImages {
 public:
  Data() : TemplateImages(kBatch, kSize, kClasses) {}
};

std::vector<float> Train(Trainer& t, int steps) {
  return testing::TrainOnTemplateImages(t, steps, kBatch, kSize, kClasses);
}

class ResNetGpuTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(ResNetGpuTest, GraphEqualsBulkedBitwiseOverFiftyStepsAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, layout] = GetParam();
  auto net = models::BuildResNet(SmallResNet(layout));
  ASSERT_TRUE(net.ok()) << net.status();
  auto bulked = MakeTrainer(*net, ExecMode::kBulked, true, 0, {}, dtype);
  auto graph = MakeTrainer(*net, ExecMode::kGraph, true, 0, {}, dtype);
  ASSERT_TRUE(bulked && graph);
  std::cout << "ResNet-18 " << DTypeName(dtype) << " " << LayoutName(layout) << ": "
            << graph->stats().ToString() << "\n";
  const std::vector<float> bulked_losses = Train(*bulked, 50);
  const std::vector<float> graph_losses = Train(*graph, 50);
  EXPECT_EQ(bulked_losses, graph_losses);
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*bulked->GetParameter(name), *graph->GetParameter(name)) << name;
  }
  float first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += graph_losses[i], last += graph_losses[45 + i];
  EXPECT_LT(last, 0.7f * first) << ::testing::PrintToString(graph_losses);
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
  EXPECT_EQ(graph->stats().graph_replays, 50);
  if (dtype == DType::kFloat32) return;
  // The same weights and batch: the forward differs by bfloat16 rounding (8 significant bits)
  // through 18 layers.
  auto fp32 = MakeTrainer(*net, ExecMode::kGraph, true, 0, {}, DType::kFloat32);
  ASSERT_TRUE(fp32);
  const std::vector<float> reference = Train(*fp32, 1);
  EXPECT_NEAR(graph_losses[0], reference[0], 2e-2 * reference[0]);
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, ResNetGpuTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               LayoutName(std::get<1>(info.param)));
                         });

class ResNetLayoutGpuTest : public ::testing::TestWithParam<std::tuple<Layout, bool, int>> {};

// Every ReLU of the network, by the value it outputs.
std::vector<Value> ReluOutputs(const Graph& graph) {
  std::vector<Value> relus;
  for (const Node& node : graph.nodes()) {
    if (node.op->name == "relu") relus.push_back(Value{node.id, 0});
  }
  return relus;
}

// ReLU decisions the GPU took otherwise than the float64 step: elements whose pre-activation is
// positive in one and not in the other. `margin` is the largest |pre-activation| at such an
// element relative to the largest in its tensor: fp32 rounding (another summation order) can
// decide the side of a value within ~1e-6 of zero, never of one far from it.
struct ReluFlips {
  int count = 0;
  double margin = 0;
  std::string where;
};

ReluFlips CountReluFlips(Trainer& gpu, ir::ReferenceExecutor& exact, const Graph& graph,
                         absl::Span<const Value> relus) {
  ReluFlips flips;
  for (const Value& relu : relus) {
    const std::vector<float> out = *gpu.Read(relu);
    auto z = (*exact.Tensor(graph.node(relu.node).inputs[0]))->data<double>();
    double scale = 0;
    for (double v : z) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < out.size(); ++i) {
      if ((out[i] > 0) == (z[i] > 0)) continue;
      ++flips.count;
      flips.margin = std::max(flips.margin, std::abs(z[i]) / scale);
      flips.where = absl::StrCat(graph.node(relu.node).name, "[", i, "]");
    }
  }
  return flips;
}

// Both layouts run our batch-norm kernels (NCHW through its planar view), fused with the residual
// add and ReLU. Each layout also unfused and on one lane, to tell a lowering from a fusion or a
// lane ordering. The truth is the float64 step from the same weights and batches.
//
// One ReLU decided differently moves the updates by more than rounding does: its element's whole
// gradient goes or stays, which shifts the bias gradients of the batch norms reading it by about
// 1/(N·H·W) (0.8% at ResNet-18's 4x4 layer3 with batch 8) and the updates of every layer below by
// as much. NCHW meets such a tie on this batch: layer3.0's output element 3371 has a float64
// pre-activation 8e-7 of its tensor's largest from zero, and fp32 (any summation order) may put it
// on either side (H100, docs/results/history/2026-11-23_1d2a383.md; other image sizes and depths
// meet none and agree within 2e-3).
// So the test checks that every decision that differs is a tie, allows a tie's cost only when
// there is one, and compares the second step only when the first took float64's path (after a tie
// the two runs train different weights). A wrong gradient is off by order 1 either way.
TEST_P(ResNetLayoutGpuTest, FirstStepsMatchTheFloat64Step) {
  REPRISE_REQUIRE_GPU();
  const auto [layout, fuse, lanes] = GetParam();
  auto net = models::BuildResNet(SmallResNet(layout));
  ASSERT_TRUE(net.ok());
  const std::vector<Value> relus = ReluOutputs(net->graph);
  auto gpu = MakeTrainer(*net, ExecMode::kGraph, fuse, lanes, relus);
  ASSERT_TRUE(gpu);
  auto training = autodiff::BuildTrainingGraph(net->graph, net->loss, {.learning_rate = 0.005f});
  ASSERT_TRUE(training.ok());
  ir::ReferenceExecutor exact(training->graph, /*float64=*/true, /*seed=*/42);
  absl::flat_hash_map<std::string, std::vector<float>> initial;
  for (const std::string& name : gpu->ParameterNames()) {
    initial[name] = *gpu->GetParameter(name);
    ASSERT_TRUE(
        exact.SetLeaf(name, std::vector<double>(initial[name].begin(), initial[name].end())).ok());
  }
  Data data;
  std::vector<float> x;
  std::vector<int32_t> y;
  int flips_so_far = 0;
  for (int s = 0; s < 2; ++s) {
    if (flips_so_far > 0) break;  // After a tie the two runs train different weights.
    data.Next(x, y);
    ASSERT_TRUE(gpu->SetInput("images", x).ok());
    ASSERT_TRUE(gpu->SetInput("labels", y).ok());
    ASSERT_TRUE(gpu->Step().ok());
    ASSERT_TRUE(exact.SetLeaf("images", std::vector<double>(x.begin(), x.end())).ok());
    ASSERT_TRUE(exact.SetLeaf("labels", y).ok());
    ASSERT_TRUE(exact.Run().ok());
    const double exact_loss = (*exact.Tensor(net->loss))->data<double>()[0];
    EXPECT_NEAR(*gpu->Loss(), exact_loss, 1e-4 * std::max(1.0, std::abs(exact_loss)))
        << "step " << s;
    const ReluFlips flips = CountReluFlips(*gpu, exact, net->graph, relus);
    std::cout << LayoutName(layout) << " step " << s << ": " << flips.count
              << " ReLU decisions unlike float64" << (flips.count ? " at " + flips.where : "")
              << ", margin " << flips.margin << "\n";
    EXPECT_LT(flips.margin, 1e-5) << "a ReLU decision far from a tie differs at " << flips.where;
    flips_so_far += flips.count;
    // After the first step each update is the step's gradient alone (scaled), so a difference
    // shows in the layer where it starts, before the next forward spreads it everywhere.
    SCOPED_TRACE(absl::StrCat("updates after step ", s, ", ", flips_so_far, " ReLU ties so far"));
    testing::ExpectUpdatesAgree(
        gpu->ParameterNames(), [&](const std::string& name) { return initial.at(name); },
        [&](const std::string& name) { return *gpu->GetParameter(name); },
        [&](const std::string& name) {
          auto e = (*exact.Leaf(name))->data<double>();
          return std::vector<float>(e.begin(), e.end());
        },
        /*total=*/flips_so_far == 0 ? 2e-3 : 1e-2);
  }
}

// The test name of one configuration: "NCHW", "NCHW_unfused", "NCHW_one_lane", ...
std::string ConfigName(const ::testing::TestParamInfo<std::tuple<Layout, bool, int>>& info) {
  const auto [layout, fuse, lanes] = info.param;
  return absl::StrCat(LayoutName(layout), fuse ? "" : "_unfused", lanes == 1 ? "_one_lane" : "");
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ResNetLayoutGpuTest,
                         ::testing::Values(std::make_tuple(Layout::kNCHW, true, 0),
                                           std::make_tuple(Layout::kNHWC, true, 0),
                                           std::make_tuple(Layout::kNCHW, false, 0),
                                           std::make_tuple(Layout::kNCHW, true, 1),
                                           std::make_tuple(Layout::kNHWC, false, 1)),
                         ConfigName);

}  // namespace
}  // namespace reprise
