// The optimizer part of the training graph, run on the float64 CPU reference: SGD, SGD with
// Nesterov, Adam and AdamW, with clipping, each schedule and rank-1 parameters left undecayed,
// against PyTorch's formulas (torch.optim.SGD, Adam, AdamW, clip_grad_norm_, the LR schedulers)
// written out here in double over 100 steps of a small MLP; bad options are clear errors.
#include "src/autodiff/optimizer_graph.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, std::vector<double>>;

// The rate of update s (0-based), from the schedulers' definitions.
double ScheduledRate(const OptimizerOptions& o, int64_t s) {
  const LrSchedule& k = o.schedule;
  const double lr = o.learning_rate;
  if (s < k.warmup_steps) return lr * (s + 1) / k.warmup_steps;
  const int64_t d = s - k.warmup_steps;
  switch (k.decay) {
    case LrDecay::kConstant:
      return lr;
    case LrDecay::kCosine: {
      const double eta_min = lr * k.min_lr_factor;
      const int64_t t_max = k.total_steps - k.warmup_steps;
      const double t = static_cast<double>(std::min(d, t_max));
      return eta_min + (lr - eta_min) * (1 + std::cos(M_PI * t / t_max)) / 2;
    }
    case LrDecay::kStep:
      return lr * std::pow(static_cast<double>(k.gamma), static_cast<double>(d / k.step_size));
  }
  return lr;
}

// PyTorch's update of every parameter, in double, given the step's raw gradients.
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(const OptimizerOptions& o, Tensors params) : o_(o), w_(std::move(params)) {}

  void Step(Tensors grads) {
    if (o_.max_grad_norm > 0) {
      double sum = 0;
      for (const auto& [name, g] : grads) {
        for (double x : g) sum += x * x;
      }
      const double coef = std::min(1.0, o_.max_grad_norm / (std::sqrt(sum) + 1e-6));
      for (auto& [name, g] : grads) {
        for (double& x : g) x *= coef;
      }
    }
    const double lr = ScheduledRate(o_, step_);
    ++step_;
    for (auto& [name, w] : w_) {
      std::vector<double>& g = grads.at(name);
      const bool rank1 = name.find(".bias") != std::string::npos;
      const double wd = rank1 && !o_.decay_rank1 ? 0.0 : o_.weight_decay;
      std::vector<double>& m = first_[name];
      std::vector<double>& v = second_[name];
      m.resize(w.size());
      v.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (o_.kind == OptimizerKind::kSgd) {
          const double d = g[i] + wd * w[i];
          m[i] = step_ == 1 ? d : o_.momentum * m[i] + d;
          w[i] -= lr * (o_.nesterov ? d + o_.momentum * m[i] : m[i]);
          continue;
        }
        double d = g[i];
        if (o_.kind == OptimizerKind::kAdamW) {
          w[i] -= lr * wd * w[i];
        } else {
          d += wd * w[i];
        }
        m[i] = o_.beta1 * m[i] + (1 - o_.beta1) * d;
        v[i] = o_.beta2 * v[i] + (1 - o_.beta2) * d * d;
        const double m_hat = m[i] / (1 - std::pow(double{o_.beta1}, step_));
        const double v_hat = v[i] / (1 - std::pow(double{o_.beta2}, step_));
        w[i] -= lr * m_hat / (std::sqrt(v_hat) + o_.epsilon);
      }
    }
  }
  const Tensors& weights() const { return w_; }
  const Tensors& first_moments() const { return first_; }

 private:
  OptimizerOptions o_;
  Tensors w_, first_, second_;
  int step_ = 0;
};

std::vector<double> Read(ir::ReferenceExecutor& exec, Value v) {
  const ir::HostTensor* t = *exec.Tensor(v);
  auto data = t->data<double>();
  return {data.begin(), data.end()};
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i])))
        << what << "[" << i << "]";
  }
}

// Trains a small MLP for `steps` steps on the float64 reference with `o`, and the same model with
// ReferenceOptimizer on gradients from the backward graph; parameters and moments must agree.
void ExpectMatchesPyTorchFormulas(const OptimizerOptions& o, int steps = 100) {
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 6, .depth = 2, .width = 12, .classes = 4});
  ASSERT_TRUE(mlp.ok());
  auto train = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, o);
  ASSERT_TRUE(train.ok()) << train.status();
  auto back = autodiff::BuildBackward(mlp->graph, mlp->loss);
  ASSERT_TRUE(back.ok());
  ir::ReferenceExecutor exec(train->graph, /*float64=*/true, /*seed=*/5);
  ir::ReferenceExecutor grads(back->graph, /*float64=*/true, /*seed=*/5);
  Tensors initial;
  for (int32_t p : back->parameters) {
    initial[back->graph.node(p).name] = Read(grads, {p, 0});
  }
  ReferenceOptimizer reference(o, initial);
  std::mt19937 rng(17);
  std::normal_distribution<double> normal;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> x(8 * 6);
    for (double& v : x) v = normal(rng);
    std::vector<int32_t> y(8);
    for (int i = 0; i < 8; ++i) y[i] = (x[i * 6] > 0) + 2 * (x[i * 6 + 1] > 0);
    for (ir::ReferenceExecutor* e : {&exec, &grads}) {
      ASSERT_TRUE(e->SetLeaf("features", x).ok());
      ASSERT_TRUE(e->SetLeaf("labels", y).ok());
    }
    for (const auto& [name, w] : reference.weights()) ASSERT_TRUE(grads.SetLeaf(name, w).ok());
    ASSERT_TRUE(grads.Run().ok());
    Tensors g;
    for (int32_t p : back->parameters) {
      g[back->graph.node(p).name] = Read(grads, back->gradients.at(p));
    }
    reference.Step(std::move(g));
    ASSERT_TRUE(exec.Run().ok());
  }
  for (const auto& [name, w] : reference.weights()) {
    ExpectClose(Read(exec, {*train->graph.FindNode(name), 0}), w, 1e-9, name);
    if (o.kind != OptimizerKind::kSgd) {
      ExpectClose(Read(exec, {*train->graph.FindNode(name + ".exp_avg"), 0}),
                  reference.first_moments().at(name), 1e-9, name + ".exp_avg");
    }
  }
  // The device step counter, where the optimizer needs one, counted every step.
  auto counter = exec.Leaf(autodiff::kStepCounter);
  const bool counted = o.kind != OptimizerKind::kSgd || o.schedule.warmup_steps > 0 ||
                       o.schedule.decay != LrDecay::kConstant;
  ASSERT_EQ(counter.ok(), counted);
  if (counted) EXPECT_EQ((*counter)->data<int32_t>()[0], steps);
}

TEST(OptimizerGraphTest, SgdWithMomentumAndWeightDecayMatchesPyTorch) {
  ExpectMatchesPyTorchFormulas(
      {.kind = OptimizerKind::kSgd, .learning_rate = 0.05f, .weight_decay = 0.01f});
}

TEST(OptimizerGraphTest, SgdWithNesterovMatchesPyTorch) {
  ExpectMatchesPyTorchFormulas({.kind = OptimizerKind::kSgd,
                                .learning_rate = 0.05f,
                                .momentum = 0.8f,
                                .nesterov = true,
                                .weight_decay = 0.01f});
}

TEST(OptimizerGraphTest, AdamMatchesPyTorch) {
  ExpectMatchesPyTorchFormulas(
      {.kind = OptimizerKind::kAdam, .learning_rate = 0.01f, .weight_decay = 0.02f});
}

TEST(OptimizerGraphTest, AdamWMatchesPyTorch) {
  ExpectMatchesPyTorchFormulas({.kind = OptimizerKind::kAdamW,
                                .learning_rate = 0.01f,
                                .beta1 = 0.8f,
                                .beta2 = 0.99f,
                                .epsilon = 1e-6f,
                                .weight_decay = 0.1f});
}

TEST(OptimizerGraphTest, AdamWWithoutDecayOnRankOneParametersMatchesTwoParameterGroups) {
  const OptimizerOptions o{.kind = OptimizerKind::kAdamW,
                           .learning_rate = 0.01f,
                           .weight_decay = 0.5f,
                           .decay_rank1 = false};
  ExpectMatchesPyTorchFormulas(o);
  auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  auto t = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, o);
  ASSERT_TRUE(t.ok()) << t.status();
  const Graph& g = t->graph;
  const int32_t none = *g.FindNode(autodiff::kNoWeightDecay);
  const int32_t decay = *g.FindNode(autodiff::kWeightDecay);
  EXPECT_EQ(g.node(*g.FindNode("fc0.bias.adamw")).inputs[9].node, none);
  EXPECT_EQ(g.node(*g.FindNode("fc0.weight.adamw")).inputs[9].node, decay);
}

TEST(OptimizerGraphTest, ClippingMatchesClipGradNorm) {
  // A small max_norm clips every step; a large one never does.
  for (float max_norm : {0.05f, 1e6f}) {
    ExpectMatchesPyTorchFormulas({.kind = OptimizerKind::kSgd,
                                  .learning_rate = 0.1f,
                                  .momentum = 0.5f,
                                  .max_grad_norm = max_norm});
    ExpectMatchesPyTorchFormulas(
        {.kind = OptimizerKind::kAdam, .learning_rate = 0.01f, .max_grad_norm = max_norm});
  }
}

TEST(OptimizerGraphTest, AdamWWithClippingAndWarmUpCosineMatchesPyTorch) {
  ExpectMatchesPyTorchFormulas({.kind = OptimizerKind::kAdamW,
                                .learning_rate = 0.02f,
                                .weight_decay = 0.05f,
                                .decay_rank1 = false,
                                .max_grad_norm = 0.5f,
                                .schedule = {.warmup_steps = 10,
                                             .decay = LrDecay::kCosine,
                                             .total_steps = 80,
                                             .min_lr_factor = 0.1f}});
}

TEST(OptimizerGraphTest, SgdWithEachScheduleMatchesPyTorch) {
  const LrSchedule schedules[] = {
      {.warmup_steps = 20},
      {.decay = LrDecay::kCosine, .total_steps = 60},
      {.warmup_steps = 5, .decay = LrDecay::kCosine, .total_steps = 100, .min_lr_factor = 0.2f},
      {.decay = LrDecay::kStep, .step_size = 30, .gamma = 0.5f},
      {.warmup_steps = 8, .decay = LrDecay::kStep, .step_size = 25, .gamma = 0.3f},
  };
  for (const LrSchedule& schedule : schedules) {
    SCOPED_TRACE(::testing::Message() << "warm-up " << schedule.warmup_steps << ", decay "
                                      << static_cast<int>(schedule.decay));
    ExpectMatchesPyTorchFormulas(
        {.kind = OptimizerKind::kSgd, .learning_rate = 0.1f, .schedule = schedule});
  }
}

// The scheduled rate node alone, step by step, with the base rate changed in between as
// Trainer::SetLearningRate does.
TEST(OptimizerGraphTest, ScheduledRateFollowsTheStepCounterAndTheBoundBaseRate) {
  OptimizerOptions o{
      .kind = OptimizerKind::kAdam,
      .learning_rate = 0.5f,
      .schedule = {
          .warmup_steps = 4, .decay = LrDecay::kCosine, .total_steps = 50, .min_lr_factor = 0.05f}};
  auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  auto t = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, /*float64=*/true, 1);
  const Value rate{*t->graph.FindNode(autodiff::kScheduledRate), 0};
  for (int s = 0; s < 100; ++s) {
    if (s == 30) {
      o.learning_rate = 0.25f;
      ASSERT_TRUE(exec.SetLeaf(autodiff::kLearningRate, std::vector<double>{0.25}).ok());
    }
    ASSERT_TRUE(exec.Run().ok());
    EXPECT_NEAR(Read(exec, rate)[0], ScheduledRate(o, s), 1e-14) << "step " << s;
  }
}

TEST(OptimizerGraphTest, SgdOptionsBuildTheSameGraphAsBefore) {
  auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  auto t = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {.learning_rate = 0.1f});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->graph.FindNode(autodiff::kStepCounter).ok());  // Plain SGD needs no counter.
  EXPECT_FALSE(t->graph.FindNode(autodiff::kScheduledRate).ok());
  EXPECT_FALSE(t->graph.FindNode(autodiff::kGradNorm).ok());
  const Node& update = t->graph.node(*t->graph.FindNode("fc0.weight.sgd"));
  EXPECT_EQ(update.inputs.size(), 6u);
  EXPECT_TRUE(update.attrs.empty());
  EXPECT_TRUE(t->graph.FindNode("fc0.weight.momentum").ok());
}

TEST(OptimizerGraphTest, AdamKeepsItsMomentsUnderPyTorchsNames) {
  auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  auto t = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss,
                                            {.kind = OptimizerKind::kAdam, .max_grad_norm = 1});
  ASSERT_TRUE(t.ok()) << t.status();
  for (const char* name : {"fc0.weight.exp_avg", "fc0.weight.exp_avg_sq", "fc1.bias.exp_avg",
                           autodiff::kStepCounter}) {
    auto id = t->graph.FindNode(name);
    ASSERT_TRUE(id.ok()) << name;
    EXPECT_EQ(t->graph.node(*id).op, &ir::StateOp()) << name;
  }
  // Every update reads the clip coefficient; the counter advances after all of them.
  const int32_t norm = *t->graph.FindNode(autodiff::kGradNorm);
  const Node& update = t->graph.node(*t->graph.FindNode("fc0.weight.adam"));
  EXPECT_EQ(update.inputs.back(), (Value{norm, 1}));
  const Node& advance = t->graph.node(*t->graph.FindNode("rng.advance"));
  EXPECT_THAT(advance.control_inputs, ::testing::Contains(update.id));
}

TEST(OptimizerGraphTest, BadOptionsAreInvalidArgumentNamingTheField) {
  struct Case {
    OptimizerOptions options;
    const char* message;
  };
  const Case cases[] = {
      {{.learning_rate = -0.1f}, "learning_rate"},
      {{.learning_rate = NAN}, "learning_rate"},
      {{.momentum = -1}, "momentum"},
      {{.momentum = 0, .nesterov = true}, "nesterov"},
      {{.weight_decay = -1e-4f}, "weight_decay"},
      {{.max_grad_norm = -1}, "max_grad_norm"},
      {{.kind = OptimizerKind::kAdam, .beta1 = 1}, "beta1"},
      {{.kind = OptimizerKind::kAdamW, .beta2 = -0.5f}, "beta2"},
      {{.kind = OptimizerKind::kAdam, .epsilon = -1e-8f}, "epsilon"},
      {{.kind = OptimizerKind::kAdamW, .epsilon = 0}, "epsilon must be finite and greater than 0"},
      {{.schedule = {.warmup_steps = 200, .decay = LrDecay::kCosine, .total_steps = 100}},
       "warm-up"},
      {{.schedule = {.warmup_steps = 200, .total_steps = 100}}, "warm-up"},
      {{.schedule = {.warmup_steps = -1}}, "warmup_steps"},
      {{.schedule = {.decay = LrDecay::kCosine, .total_steps = 10, .min_lr_factor = 2}},
       "min_lr_factor"},
      {{.schedule = {.decay = LrDecay::kStep, .step_size = 0}}, "step_size"},
      {{.schedule = {.decay = LrDecay::kStep, .step_size = 10, .gamma = 0}}, "gamma"},
  };
  auto mlp = models::BuildMlp({.batch = 2, .input_features = 3, .depth = 1, .width = 4});
  for (const Case& c : cases) {
    auto t = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, c.options);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace reprise
