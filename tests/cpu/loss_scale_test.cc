// Loss scaling on the CPU reference: the scaler's state machine against PyTorch's GradScaler rules
// over sequences of clean and overflowing steps; float32 and float64 training with a power-of-two
// scale giving the very bits of unscaled training (scaling by 2^k is exact); float16 training
// following float32; and overflowing steps skipped whole: weights, optimizer state and the step
// counter unchanged, the scale backed off and the skip counted.
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/plan.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// torch.amp.GradScaler's update (aten _amp_update_scale_), written from its definition.
struct TorchScaler {
  double scale;
  int tracker = 0;
  int skipped = 0;
  void Update(bool found_inf, double growth, double backoff, int interval) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff);
      tracker = 0;
      ++skipped;
      return;
    }
    if (tracker + 1 == interval) {
      const float grown = static_cast<float>(scale * growth);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      ++tracker;
    }
  }
};

TEST(LossScaleTest, StateMachineFollowsGradScalerOverRandomSequences) {
  std::mt19937 rng(7);
  for (const int interval : {1, 2, 3, 7}) {
    codegen::LossScaleState<float> s{.scale = 65536.0f};
    TorchScaler torch{.scale = 65536.0};
    std::bernoulli_distribution overflow(0.2);
    for (int step = 0; step < 500; ++step) {
      const bool found = overflow(rng);
      s = codegen::NextLossScale(s, found, 2.0f, 0.5f, interval);
      torch.Update(found, 2.0, 0.5, interval);
      ASSERT_EQ(s.scale, torch.scale) << "interval " << interval << " step " << step;
      ASSERT_EQ(s.growth_tracker, torch.tracker) << "interval " << interval << " step " << step;
      ASSERT_EQ(s.skipped_steps, torch.skipped) << "interval " << interval << " step " << step;
    }
  }
}

TEST(LossScaleTest, GrowthStopsBeforeFloat32OverflowsAndBackoffReachesSubnormals) {
  codegen::LossScaleState<float> s{.scale = 0x1p127f};
  s = codegen::NextLossScale(s, false, 2.0f, 0.5f, 1);
  EXPECT_EQ(s.scale, 0x1p127f);  // 2^128 is not a float: the scale stays.
  EXPECT_EQ(s.growth_tracker, 0);
  s = codegen::NextLossScale(s, false, 1.5f, 0.5f, 1);
  EXPECT_EQ(s.scale, 0x1p127f * 1.5f);
  for (int i = 0; i < 300; ++i) s = codegen::NextLossScale(s, true, 2.0f, 0.5f, 1);
  EXPECT_EQ(s.scale, 0.0f);  // Halved past the subnormals; every step after skips.
  EXPECT_EQ(s.skipped_steps, 300);
}

TEST(LossScaleTest, TrackerBeyondTheIntervalGrowsAtOnce) {  // A checkpoint of a longer interval.
  codegen::LossScaleState<float> s{.scale = 8.0f, .growth_tracker = 10};
  s = codegen::NextLossScale(s, false, 2.0f, 0.5f, 4);
  EXPECT_EQ(s.scale, 16.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

// The loss_scale_update op's reference is the same machine, fed through a graph.
TEST(LossScaleTest, UpdateOpFollowsTheStateMachineInFloat32AndFloat64) {
  for (const bool float64 : {false, true}) {
    Graph g;
    auto scale = g.AddState("scale", {Shape{}, DType::kFloat32}, Initializer::Constant(1024.0));
    auto tracker = g.AddState("tracker", {Shape{}, DType::kInt32}, Initializer::Zeros());
    auto skipped = g.AddState("skipped", {Shape{}, DType::kInt32}, Initializer::Zeros());
    auto check = g.AddInput("check", {Shape{2}, DType::kFloat32});
    ASSERT_TRUE(check.ok());
    auto update = g.AddOp(
        ops::LossScaleUpdateOp(), "update", {*scale, *tracker, *skipped, *check},
        {{"growth_factor", 2.0}, {"backoff_factor", 0.25}, {"growth_interval", int64_t{3}}});
    ASSERT_TRUE(update.ok()) << update.status();
    ir::ReferenceExecutor exec(g, float64, 1);
    TorchScaler torch{.scale = 1024.0};
    std::mt19937 rng(3);
    std::bernoulli_distribution overflow(0.3);
    for (int step = 0; step < 200; ++step) {
      const bool found = overflow(rng);
      ASSERT_TRUE(exec.SetLeaf("check", std::vector<double>{1.0, found ? 1.0 : 0.0}).ok());
      ASSERT_TRUE(exec.Run().ok());
      torch.Update(found, 2.0, 0.25, 3);
      ASSERT_EQ(ir::FloatElement(**exec.Leaf("scale"), 0), torch.scale) << step;
      ASSERT_EQ((*exec.Leaf("tracker"))->data<int32_t>()[0], torch.tracker) << step;
      ASSERT_EQ((*exec.Leaf("skipped"))->data<int32_t>()[0], torch.skipped) << step;
    }
  }
}

TEST(LossScaleTest, CheckFlagsNonFiniteChunksAndInvertsTheScale) {
  Graph g;
  auto a = g.AddInput("a", {Shape{10000}, DType::kFloat32});
  auto b = g.AddInput("b", {Shape{3}, DType::kFloat32});
  auto scale = g.AddInput("scale", {Shape{}, DType::kFloat32}, Initializer::Constant(4096.0));
  auto flags = g.AddOp1(ops::GradNonfiniteOp(), "flags", {*a, *b});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(g.spec(*flags).shape, (Shape{3 + 1}));  // 10000 = 2 chunks of 4096 and a part.
  auto check = g.AddOp1(ops::LossScaleCheckOp(), "check", {*flags, *scale});
  ASSERT_TRUE(check.ok()) << check.status();
  ir::ReferenceExecutor exec(g, false, 1);
  std::vector<double> x(10000, 1.5);
  auto values = [&](Value v) {
    auto data = (*exec.Tensor(v))->data<float>();
    return std::vector<float>(data.begin(), data.end());
  };
  ASSERT_TRUE(exec.SetLeaf("a", x).ok());
  ASSERT_TRUE(exec.SetLeaf("b", std::vector<double>{0, -1e38, 3}).ok());
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_THAT(values(*flags), ::testing::ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(values(*check), ::testing::ElementsAre(1.0f / 4096, 0.0f));
  x[9000] = INFINITY;
  ASSERT_TRUE(exec.SetLeaf("a", x).ok());
  ASSERT_TRUE(exec.SetLeaf("b", std::vector<double>{0, NAN, 3}).ok());
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_THAT(values(*flags), ::testing::ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(values(*check), ::testing::ElementsAre(1.0f / 4096, 1.0f));
}

TEST(LossScaleTest, KernelsCompileForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::LossScaleKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_NE(compiled->ptx.find(".entry " + kernel.name), std::string::npos) << kernel.name;
  }
}

TEST(LossScaleTest, BadOptionsAreInvalidArgumentNamingTheField) {
  auto status = [](LossScaleOptions o) { return autodiff::ValidateLossScaleOptions(o); };
  EXPECT_THAT(status({.mode = LossScaling::kDynamic, .init_scale = 0}).message(),
              HasSubstr("init_scale"));
  EXPECT_THAT(status({.mode = LossScaling::kStatic, .init_scale = INFINITY}).message(),
              HasSubstr("init_scale"));
  EXPECT_THAT(status({.mode = LossScaling::kDynamic, .growth_factor = 1}).message(),
              HasSubstr("growth_factor"));
  EXPECT_THAT(status({.mode = LossScaling::kDynamic, .backoff_factor = 1}).message(),
              HasSubstr("backoff_factor"));
  EXPECT_THAT(status({.mode = LossScaling::kDynamic, .growth_interval = 0}).message(),
              HasSubstr("growth_interval"));
  EXPECT_TRUE(status({.mode = LossScaling::kStatic, .growth_factor = 0}).ok());  // Unused.
  EXPECT_TRUE(status({.mode = LossScaling::kOff, .init_scale = -1}).ok());
}

TEST(LossScaleTest, AutoIsDynamicForFloat16Only) {
  EXPECT_EQ(autodiff::ResolveLossScaling({}, DType::kFloat16).mode, LossScaling::kDynamic);
  EXPECT_EQ(autodiff::ResolveLossScaling({}, DType::kBFloat16).mode, LossScaling::kOff);
  EXPECT_EQ(autodiff::ResolveLossScaling({}, DType::kFloat32).mode, LossScaling::kOff);
  EXPECT_EQ(autodiff::ResolveLossScaling({.mode = LossScaling::kStatic}, DType::kFloat32).mode,
            LossScaling::kStatic);
  EXPECT_EQ(autodiff::ResolveLossScaling({.mode = LossScaling::kOff}, DType::kFloat16).mode,
            LossScaling::kOff);
}

// A small MLP, the leaves a step changes, and a fixed sequence of batches.
struct Mlp {
  models::Mlp model;
  static Mlp Build() {
    auto mlp =
        models::BuildMlp({.batch = 8, .input_features = 6, .depth = 2, .width = 12, .classes = 4});
    EXPECT_TRUE(mlp.ok());
    return {*std::move(mlp)};
  }
};

void SetBatch(ir::ReferenceExecutor& exec, int step, double magnitude = 1) {
  std::mt19937 rng(100 + step);
  std::normal_distribution<double> normal;
  std::vector<double> x(8 * 6);
  for (double& v : x) v = magnitude * normal(rng);
  std::vector<int32_t> y(8);
  for (int i = 0; i < 8; ++i) y[i] = (x[i * 6] > 0) + 2 * (x[i * 6 + 1] > 0);
  ASSERT_TRUE(exec.SetLeaf("features", x).ok());
  ASSERT_TRUE(exec.SetLeaf("labels", y).ok());
}

// Every parameter and state tensor of `g` but loss scaling's own, as doubles.
std::map<std::string, std::vector<double>> Weights(const Graph& g, ir::ReferenceExecutor& exec) {
  std::map<std::string, std::vector<double>> out;
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : g.NodesOf(op)) {
      const std::string& name = g.node(id).name;
      if (name.rfind(autodiff::kLossScale, 0) == 0) continue;
      const ir::HostTensor* t = *exec.Tensor({id, 0});
      std::vector<double>& values = out[name];
      for (int64_t i = 0; i < t->size(); ++i) {
        values.push_back(t->dtype() == DType::kInt32 ? t->data<int32_t>()[i]
                                                     : ir::FloatElement(*t, i));
      }
    }
  }
  return out;
}

double LeafValue(ir::ReferenceExecutor& exec, const char* name) {
  const ir::HostTensor* t = *exec.Leaf(name);
  return t->dtype() == DType::kInt32 ? t->data<int32_t>()[0] : ir::FloatElement(*t, 0);
}

// With a power-of-two scale and no overflow, scaling is exact: every gradient is the unscaled one
// times 2^k, unscaled exactly, so training gives the very bits of training without scaling, in
// float32 and in float64, with every optimizer and clipping (whose norm is of unscaled gradients).
TEST(LossScaleTest, PowerOfTwoScaleTrainsBitForBitAsUnscaled) {
  const Mlp mlp = Mlp::Build();
  const std::vector<OptimizerOptions> optimizers = {
      {.kind = OptimizerKind::kSgd, .learning_rate = 0.05f, .momentum = 0.9f},
      {.kind = OptimizerKind::kSgd,
       .learning_rate = 0.05f,
       .nesterov = true,
       .weight_decay = 1e-3f,
       .max_grad_norm = 0.5f},
      {.kind = OptimizerKind::kAdam, .learning_rate = 1e-2f, .weight_decay = 1e-3f},
      {.kind = OptimizerKind::kAdamW,
       .learning_rate = 1e-2f,
       .weight_decay = 1e-2f,
       .max_grad_norm = 0.3f,
       .schedule = {.warmup_steps = 3}},
  };
  for (const bool float64 : {false, true}) {
    for (size_t k = 0; k < optimizers.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "optimizer " << k << (float64 ? " f64" : " f32"));
      auto plain = autodiff::BuildTrainingGraphWith(mlp.model.graph, mlp.model.loss, optimizers[k]);
      auto scaled = autodiff::BuildTrainingGraphWith(
          mlp.model.graph, mlp.model.loss, optimizers[k],
          {.mode = LossScaling::kDynamic, .init_scale = 1024.0f, .growth_interval = 2});
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_TRUE(scaled.ok()) << scaled.status();
      ir::ReferenceExecutor a(plain->graph, float64, 9), b(scaled->graph, float64, 9);
      for (int step = 0; step < 12; ++step) {
        SetBatch(a, step);
        SetBatch(b, step);
        ASSERT_TRUE(a.Run().ok());
        ASSERT_TRUE(b.Run().ok());
        ASSERT_EQ(Weights(plain->graph, a), Weights(scaled->graph, b)) << "step " << step;
      }
      EXPECT_EQ(LeafValue(b, autodiff::kLossScale), 1024.0 * 64);  // Grown every second step.
      EXPECT_EQ(LeafValue(b, autodiff::kLossScaleSkippedSteps), 0);
    }
  }
}

// One step of a loss-scaled graph whose gradients overflow is skipped entirely.
TEST(LossScaleTest, OverflowingStepIsSkippedAndTheScaleBacksOff) {
  const Mlp mlp = Mlp::Build();
  const OptimizerOptions adam{.kind = OptimizerKind::kAdamW,
                              .learning_rate = 1e-2f,
                              .weight_decay = 1e-2f,
                              .max_grad_norm = 1.0f};
  auto scaled = autodiff::BuildTrainingGraphWith(
      mlp.model.graph, mlp.model.loss, adam,
      {.mode = LossScaling::kDynamic, .init_scale = 256.0f, .growth_interval = 1000});
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  ir::ReferenceExecutor exec(scaled->graph, false, 9);
  SetBatch(exec, 0);
  ASSERT_TRUE(exec.Run().ok());
  const auto before = Weights(scaled->graph, exec);
  EXPECT_EQ(before.at(autodiff::kStepCounter), (std::vector<double>{1, 0}));
  SetBatch(exec, 1, /*magnitude=*/1e38);  // Activations overflow: inf and NaN gradients.
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_EQ(Weights(scaled->graph, exec), before);  // Weights, moments and the step counter.
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScale), 128.0);
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScaleSkippedSteps), 1);
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScaleGrowthTracker), 0);
  SetBatch(exec, 2);
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_NE(Weights(scaled->graph, exec), before);
  EXPECT_EQ(Weights(scaled->graph, exec).at(autodiff::kStepCounter), (std::vector<double>{2, 0}));
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScaleGrowthTracker), 1);
}

// A static scale stays put but still skips and counts overflowing steps.
TEST(LossScaleTest, StaticScaleSkipsWithoutBackingOff) {
  const Mlp mlp = Mlp::Build();
  auto scaled =
      autodiff::BuildTrainingGraphWith(mlp.model.graph, mlp.model.loss, autodiff::FromSgd({}),
                                       {.mode = LossScaling::kStatic, .init_scale = 512.0f});
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  ir::ReferenceExecutor exec(scaled->graph, false, 9);
  SetBatch(exec, 0, 1e38);
  const auto before = Weights(scaled->graph, exec);
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_EQ(Weights(scaled->graph, exec), before);
  for (int step = 1; step < 4; ++step) {
    SetBatch(exec, step);
    ASSERT_TRUE(exec.Run().ok());
  }
  EXPECT_NE(Weights(scaled->graph, exec), before);
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScale), 512.0);
  EXPECT_EQ(LeafValue(exec, autodiff::kLossScaleSkippedSteps), 1);
}

// float16 training with dynamic loss scaling on the CPU reference (each op rounding to float16 as
// the GPU does): the first steps overflow at GradScaler's initial scale and are skipped until the
// scale fits, then losses and unscaled gradients follow float32 within float16's precision.
TEST(LossScaleTest, Float16TrainingFollowsFloat32) {
  const Mlp mlp = Mlp::Build();
  auto mixed =
      passes::ConvertToMixedPrecision(mlp.model.graph, mlp.model.loss, {}, DType::kFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const OptimizerOptions sgd = autodiff::FromSgd({.learning_rate = 0.05f});
  auto f32 = autodiff::BuildTrainingGraphWith(mlp.model.graph, mlp.model.loss, sgd);
  // 2^24: d(logits) = scale / 8 per row reaches 2^21, past float16's 65504.
  auto f16 = autodiff::BuildTrainingGraphWith(
      mixed->graph, mixed->loss, sgd,
      autodiff::ResolveLossScaling({.init_scale = 0x1p24f, .growth_interval = 1000},
                                   DType::kFloat16));
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(f16.ok()) << f16.status();
  ir::ReferenceExecutor a(f32->graph, false, 9), b(f16->graph, false, 9);
  // Skipped steps: the float16 model sees the first batch until its scale fits.
  int skipped = 0;
  for (; skipped < 20; ++skipped) {
    SetBatch(b, 0);
    ASSERT_TRUE(b.Run().ok());
    if (LeafValue(b, autodiff::kLossScaleSkippedSteps) == skipped) break;
  }
  EXPECT_GE(skipped, 5);  // 2^24 down to at most 2^18 (float16 max is about 2^16).
  const double scale = LeafValue(b, autodiff::kLossScale);
  EXPECT_EQ(scale, std::ldexp(1.0, 24 - skipped));
  SetBatch(a, 0);
  ASSERT_TRUE(a.Run().ok());
  const float loss32 = (*a.Tensor(f32->loss))->data<float>()[0];
  const float loss16 = (*b.Tensor(f16->loss))->data<float>()[0];
  EXPECT_NE(loss16, loss32);
  EXPECT_NEAR(loss16, loss32, 5e-3 * loss32);
  // The gradients of the applied step, unscaled, against float32's: float16's relative precision
  // is 2^-11, accumulated over a few layers.
  for (int32_t p : f32->parameters) {
    const std::string& name = f32->graph.node(p).name;
    const int32_t q = *f16->graph.FindNode(name);
    const ir::HostTensor* g32 = *a.Tensor(f32->gradients.at(p));
    const ir::HostTensor* g16 = *b.Tensor(f16->gradients.at(q));
    double norm = 0, error = 0;
    for (int64_t i = 0; i < g32->size(); ++i) {
      const double want = ir::FloatElement(*g32, i);
      const double got = ir::FloatElement(*g16, i) / scale;
      norm += want * want;
      error += (got - want) * (got - want);
    }
    EXPECT_LT(std::sqrt(error), 1e-2 * std::sqrt(norm) + 1e-6) << name;
  }
  // And training goes on alike.
  for (int step = 1; step < 10; ++step) {
    SetBatch(a, step);
    SetBatch(b, step);
    ASSERT_TRUE(a.Run().ok());
    ASSERT_TRUE(b.Run().ok());
  }
  const float last32 = (*a.Tensor(f32->loss))->data<float>()[0];
  const float last16 = (*b.Tensor(f16->loss))->data<float>()[0];
  EXPECT_NEAR(last16, last32, 2e-2 * last32);
  EXPECT_EQ(LeafValue(b, autodiff::kLossScaleSkippedSteps), skipped);
}

// Fusion (multi-tensor updates, the fused loss; never the whole-step MLP kernel, which has no loss
// scaling) keeps the bits of the unfused loss-scaled step, overflowing steps included; the plan
// schedules on two lanes.
TEST(LossScaleTest, FusedStepGivesTheUnfusedBits) {
  const Mlp mlp = Mlp::Build();
  for (const OptimizerOptions& o :
       {autodiff::FromSgd({}),
        OptimizerOptions{
            .kind = OptimizerKind::kAdam, .learning_rate = 1e-2f, .max_grad_norm = 1}}) {
    auto training = autodiff::BuildTrainingGraphWith(
        mlp.model.graph, mlp.model.loss, o,
        {.mode = LossScaling::kDynamic, .init_scale = 64.0f, .growth_interval = 2});
    ASSERT_TRUE(training.ok()) << training.status();
    auto fused = passes::Fuse(*training, {training->loss}, {});
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_THAT(fused->whole_step_declined, HasSubstr("loss scaling"));
    int multi = 0;
    for (const Node& n : fused->training.graph.nodes()) {
      EXPECT_NE(n.op_name(), "mlp_train_step");
      if (n.op != &ops::SgdMomentumMultiOp() && n.op != &ops::SgdMultiOp() &&
          n.op != &ops::AdamMultiOp()) {
        continue;
      }
      ++multi;
      EXPECT_TRUE(ir::BoolAttrOr(n.attrs, "loss_scaled", false)) << n.name;
    }
    EXPECT_EQ(multi, 1);
    ir::ReferenceExecutor a(training->graph, false, 9), b(fused->training.graph, false, 9);
    for (int step = 0; step < 8; ++step) {
      SetBatch(a, step, step == 3 ? 1e38 : 1);
      SetBatch(b, step, step == 3 ? 1e38 : 1);
      ASSERT_TRUE(a.Run().ok());
      ASSERT_TRUE(b.Run().ok());
      ASSERT_EQ(Weights(training->graph, a), Weights(fused->training.graph, b)) << step;
    }
    EXPECT_EQ(LeafValue(b, autodiff::kLossScaleSkippedSteps), 1);
    EXPECT_EQ(LeafValue(a, autodiff::kLossScale), LeafValue(b, autodiff::kLossScale));
    auto plan = passes::BuildPlan(*std::move(training), {}, {.lanes = 2});
    ASSERT_TRUE(plan.ok()) << plan.status();
  }
}

TEST(LossScaleTest, GraphCarriesTheScalerAsState) {
  const Mlp mlp = Mlp::Build();
  auto scaled = autodiff::BuildTrainingGraphWith(
      mlp.model.graph, mlp.model.loss, autodiff::FromSgd({}), {.mode = LossScaling::kDynamic});
  ASSERT_TRUE(scaled.ok());
  const Graph& g = scaled->graph;
  for (const char* name : {autodiff::kLossScale, autodiff::kLossScaleGrowthTracker,
                           autodiff::kLossScaleSkippedSteps}) {
    auto id = g.FindNode(name);
    ASSERT_TRUE(id.ok()) << name;
    EXPECT_EQ(g.node(*id).op_name(), "state") << name;
  }
  int updates = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != &ops::SgdMomentumOp()) continue;
    ++updates;
    EXPECT_TRUE(ir::BoolAttrOr(n.attrs, "loss_scaled", false)) << n.name;
    EXPECT_EQ(g.node(n.inputs.back().node).name, autodiff::kLossScaleCheck) << n.name;
  }
  EXPECT_EQ(updates, static_cast<int>(scaled->parameters.size()));
  // Without loss scaling the graph is as before: a constant seed, no scaler.
  auto plain =
      autodiff::BuildTrainingGraphWith(mlp.model.graph, mlp.model.loss, autodiff::FromSgd({}), {});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->graph.FindNode(autodiff::kLossScale).ok());
  EXPECT_FALSE(plain->graph.FindNode(autodiff::kLossScaleCheck).ok());
}

}  // namespace
}  // namespace reprise
