// Backward mirroring on the GPU: batch_norm_apply and the pooling of a recomputed batch norm +
// ReLU output match their CPU references; a ResNet-18 trained
// with TrainOptions::mirror auto replays its captured graph with the bits of its bulked run, and
// its losses follow the unmirrored run's (bit for bit in NHWC, where the recomputed batch norm
// uses the forward kernel's own expression; within 1e-5 over the first
// two steps in NCHW, where cuDNN's forward differs, and alike after).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

class BatchNormApplyGpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(BatchNormApplyGpuTest, MatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  Graph g;
  const Shape shape = layout == Layout::kNCHW ? Shape{4, 37, 9, 7} : Shape{4, 9, 7, 37};
  const TensorSpec channel{Shape{37}};
  const Value x = *g.AddParameter("x", {shape}, Initializer::Uniform(-2, 3));
  const Value r = *g.AddParameter("r", {shape}, Initializer::Uniform(-1, 1));
  const Value gamma = *g.AddParameter("gamma", channel, Initializer::Uniform(0.5, 2));
  const Value beta = *g.AddParameter("beta", channel, Initializer::Uniform(-1, 1));
  const Value mean = *g.AddParameter("mean", channel, Initializer::Uniform(-0.5, 0.5));
  const Value invstd = *g.AddParameter("invstd", channel, Initializer::Uniform(0.5, 3));
  const std::string name(LayoutName(layout));
  ASSERT_TRUE(
      g.AddOp1(ops::BatchNormApplyOp(), "apply", {x, gamma, beta, mean, invstd}, {{"layout", name}})
          .ok());
  ASSERT_TRUE(g.AddOp1(ops::BatchNormApplyOp(), "apply_add_relu", {x, gamma, beta, mean, invstd, r},
                       {{"layout", name}, {"residual", true}, {"relu", true}})
                  .ok());
  // A chain of three steps over x, r and x again, each with its own statistics.
  std::vector<Value> chain = {x, gamma, beta, mean, invstd};
  for (const Value& step_x : {r, x}) {
    const std::string n = std::to_string(chain.size());
    chain.insert(chain.end(),
                 {step_x, *g.AddParameter("gamma" + n, channel, Initializer::Uniform(0.5, 2)),
                  *g.AddParameter("beta" + n, channel, Initializer::Uniform(-1, 1)),
                  *g.AddParameter("mean" + n, channel, Initializer::Uniform(-0.5, 0.5)),
                  *g.AddParameter("invstd" + n, channel, Initializer::Uniform(0.5, 3))});
  }
  ASSERT_TRUE(g.AddOp(ops::BatchNormApplyChainOp(), "chain", chain, {{"layout", name}}).ok());
  ir::ReferenceExecutor cpu(g, false, 17);
  ExpectGpuMatchesCpu(g, cpu, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, BatchNormApplyGpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

// The stem's twins as the fuse pass forms them: max pooling of relu(batch_norm_apply(x)),
// recomputing the window values from x and noting each window's argmax, and its gradient from
// that argmax; beside the separate ops on the same tensors (the argmax too, bit for bit).
// `ties`: small integers with unit statistics, so that most windows hold several maxima (zeros
// after the ReLU above all) and the first-maximum rule decides.
void CheckPoolingOfRecomputedActivation(bool ties) {
  Graph g;
  const Shape shape{4, 11, 9, 8};  // NHWC; 8 channels: two groups of 4 per position.
  const TensorSpec channel{Shape{8}};
  const Value x = *g.AddParameter("x", {shape}, Initializer::Uniform(-2, 3));
  auto per_channel = [&](const std::string& name, float low, float high) {
    return ties ? *g.AddConstant(name, channel,
                                 Initializer::Constant(name == "invstd" || name == "gamma" ? 1 : 0))
                : *g.AddParameter(name, channel, Initializer::Uniform(low, high));
  };
  const Value gamma = per_channel("gamma", 0.5, 2), beta = per_channel("beta", -1, 1);
  const Value mean = per_channel("mean", -0.5, 0.5), invstd = per_channel("invstd", 0.5, 3);
  const Attrs pool = {{"kernel_h", int64_t{3}},       {"kernel_w", int64_t{3}},
                      {"stride_h", int64_t{2}},       {"stride_w", int64_t{2}},
                      {"pad_h", int64_t{1}},          {"pad_w", int64_t{1}},
                      {"layout", std::string("NHWC")}};
  auto y = g.AddOp(ops::MaxPool2dBnReluOp(), "pool", {x, gamma, beta, mean, invstd}, pool);
  ASSERT_TRUE(y.ok()) << y.status();
  const Value dy = *g.AddConstant("dy", g.spec((*y)[0]), Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "pool_grad", {dy, (*y)[1], x}, pool).ok());
  Attrs apply_attrs = {{"layout", std::string("NHWC")}, {"relu", true}};
  const Value a =
      *g.AddOp1(ops::BatchNormApplyOp(), "apply", {x, gamma, beta, mean, invstd}, apply_attrs);
  const Value separate = *g.AddOp1(ops::MaxPool2dOp(), "separate_pool", {a}, pool);
  ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradOp(), "separate_grad", {dy, a, separate}, pool).ok());
  ir::ReferenceExecutor cpu(g, false, 19);
  if (ties) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> small(-2, 2);
    std::vector<double> values(g.spec(x).NumElements());
    for (double& v : values) v = small(rng);
    ASSERT_TRUE(cpu.SetLeaf("x", values).ok());
  }
  std::vector<std::string> ran;
  ExpectGpuMatchesCpu(g, cpu, ties ? 0.0 : 1e-6, {}, false, false, &ran);
  int fused_kernels = 0, gathers = 0;
  for (const std::string& launch : ran) {
    fused_kernels += launch.find("reprise_bn_relu_max_pool2d_nhwc4") != std::string::npos;
    gathers += launch.find("reprise_max_pool2d_grad_from_argmax_nhwc4") != std::string::npos;
  }
  EXPECT_EQ(fused_kernels, 1);  // The pooling, which notes the argmax too.
  EXPECT_EQ(gathers, 2);        // The fused gradient's, and the separate gradient's.
}

TEST(PoolingOfRecomputedActivationGpuTest, MatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  CheckPoolingOfRecomputedActivation(/*ties=*/false);
}

TEST(PoolingOfRecomputedActivationGpuTest, TiesMatchTheCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckPoolingOfRecomputedActivation(/*ties=*/true);
}

// Batch 8 at 128x128: at 32x32 the weight gradients, which the fused optimizer keeps to the end
// of the step, are the whole activation peak and kAuto rightly mirrors nothing.
constexpr int kBatch = 8, kSize = 128, kClasses = 4, kSteps = 10;

std::unique_ptr<Trainer> MakeTrainer(const models::ResNet& net, ExecMode mode, bool mirror,
                                     bool tf32 = false) {
  TrainOptions options;
  options.launch.mode = mode;
  options.numerics.allow_tf32 = tf32;
  options.kernels.own_weight_gradients = tf32;
  options.numerics.deterministic = true;
  options.kernels.channels_last = ChannelsLast::kOff;
  options.optimizer.learning_rate = 0.005f;
  options.seed = 42;
  if (mirror) options.mirror.policy = MirrorOptions::Policy::kAuto;
  auto trainer = Trainer::Create(net.graph, net.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

std::vector<float> Train(Trainer& t) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * 3 * kSize * kSize), losses;
  std::vector<int32_t> y(kBatch);
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < kBatch; ++i) y[i] = static_cast<int32_t>(rng() % kClasses);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f * y[i / (x.size() / kBatch)] + normal(rng);
    EXPECT_TRUE(t.SetInput("images", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

class MirrorResNetGpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(MirrorResNetGpuTest, ReplayEqualsBulkedAndLossesFollowTheUnmirroredRun) {
  REPRISE_REQUIRE_GPU();
  const Layout layout = GetParam();
  auto net = models::BuildResNet(
      {.depth = 18, .batch = kBatch, .classes = kClasses, .image_size = kSize, .layout = layout});
  ASSERT_TRUE(net.ok()) << net.status();
  auto graph = MakeTrainer(*net, ExecMode::kGraph, true);
  auto bulked = MakeTrainer(*net, ExecMode::kBulked, true);
  auto plain = MakeTrainer(*net, ExecMode::kGraph, false);
  ASSERT_TRUE(graph && bulked && plain);
  const TrainerStats stats = graph->stats();
  EXPECT_GT(stats.mirrored_nodes, 0);
  EXPECT_LT(stats.activation_peak_bytes, stats.activation_peak_unmirrored_bytes);
  EXPECT_EQ(stats.activation_peak_unmirrored_bytes, plain->stats().activation_peak_bytes);
  std::cout << "ResNet-18 " << LayoutName(layout) << " b" << kBatch << " " << kSize << "x" << kSize
            << ": " << stats.ToString() << "\n";

  const std::vector<float> replayed = Train(*graph), eager = Train(*bulked), base = Train(*plain);
  EXPECT_EQ(replayed, eager);
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*graph->GetParameter(name), *bulked->GetParameter(name)) << name;
  }
  if (layout == Layout::kNHWC) {
    EXPECT_EQ(replayed, base);
  } else {
    // A recomputed output differs from cuDNN's forward in the last bit. Through one update the
    // loss stays within 1e-5; later steps at batch 8 amplify such differences (as any two fp32
    // summation orders do, tests/gpu/update_agreement.h), so there the runs only train alike.
    for (int s = 0; s < 2; ++s) EXPECT_NEAR(replayed[s], base[s], 1e-5 * std::abs(base[s])) << s;
    double mirrored_tail = 0, base_tail = 0;
    for (int s = kSteps - 5; s < kSteps; ++s) mirrored_tail += replayed[s], base_tail += base[s];
    EXPECT_NEAR(mirrored_tail, base_tail, 0.25 * base_tail);
  }
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, MirrorResNetGpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

// With TF32, layer1's 3x3 weight gradients (32 wide here) run as reprise's own kernel in both
// modes, the mirrored one reading the recomputed batch-norm + ReLU output: the same bits.
TEST(MirrorResNetTf32GpuTest, OwnWeightGradientsKeepTheMirroredStepBitwise) {
  REPRISE_REQUIRE_GPU();
  auto net = models::BuildResNet({.depth = 18,
                                  .batch = kBatch,
                                  .classes = kClasses,
                                  .image_size = kSize,
                                  .layout = Layout::kNHWC});
  ASSERT_TRUE(net.ok()) << net.status();
  auto mirrored = MakeTrainer(*net, ExecMode::kGraph, true, /*tf32=*/true);
  auto plain = MakeTrainer(*net, ExecMode::kGraph, false, /*tf32=*/true);
  ASSERT_TRUE(mirrored && plain);
  EXPECT_GT(mirrored->stats().mirrored_nodes, 0);
  EXPECT_EQ(Train(*mirrored), Train(*plain));
  for (Trainer* t : {mirrored.get(), plain.get()}) {
    auto launches = t->ProfileLaunches(1);
    ASSERT_TRUE(launches.ok()) << launches.status();
    int own = 0;
    for (const auto& launch : *launches) {
      own += launch.kernel.find("reprise_wgrad3x3_tf32") != std::string::npos;
    }
    EXPECT_EQ(own, 4);  // layer1's two blocks, two 3x3 convolutions each.
  }
}

}  // namespace
}  // namespace reprise
