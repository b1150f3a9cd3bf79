// adam_multi: many tensors with their own weight decay give the single-tensor adam's bits; with
// the schedule and the clip norm folded in, the bits of lr_schedule, grad_sum_squares,
// clip_coefficient and adam run apart (float32 and float64, loss-scaled and skipped steps too);
// shape rules name what is wrong.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const TensorSpec kScalar{Shape{}, DType::kFloat32};

// Odd sizes and one over a chunk of the norm (4096 elements).
const Shape kShapes[] = {Shape{5, 7}, Shape{300}, Shape{1}, Shape{4097}};
constexpr int kTensors = 4;

Attrs Cosine() {
  return {{"warmup_steps", int64_t{5}},  {"decay", std::string("cosine")},
          {"total_steps", int64_t{100}}, {"min_factor", 0.1},
          {"step_size", int64_t{0}},     {"gamma", 1.0}};
}

// The leaves of both graphs of a test, created in the same order so that a seed gives them the
// same values: per tensor (w, g, m, v), then the shared scalars.
struct Leaves {
  std::vector<std::vector<Value>> tensors;
  Value lr, step, beta1, beta2, eps, wd, no_wd, clip, max_norm, check;
  // Tensors 1 and 2 are not decayed, as rank-1 parameters are not with decay_rank1 = false.
  Value DecayOf(int t) const { return t == 1 || t == 2 ? no_wd : wd; }
};

Leaves MakeLeaves(Graph& g) {
  Leaves l;
  for (int t = 0; t < kTensors; ++t) {
    const std::string name = "t" + std::to_string(t);
    const Shape& shape = kShapes[t];
    l.tensors.push_back({*g.AddParameter(name, {shape}, Initializer::Uniform(-1, 1)),
                         *g.AddConstant(name + ".g", {shape}, Initializer::Uniform(-1, 1)),
                         *g.AddState(name + ".m", {shape}, Initializer::Uniform(-1, 1)),
                         *g.AddState(name + ".v", {shape}, Initializer::Uniform(0, 1))});
  }
  l.lr = *g.AddInput("lr", kScalar, Initializer::Constant(0.01));
  l.step = *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  l.beta1 = *g.AddInput("beta1", kScalar, Initializer::Constant(0.9));
  l.beta2 = *g.AddInput("beta2", kScalar, Initializer::Constant(0.999));
  l.eps = *g.AddInput("eps", kScalar, Initializer::Constant(1e-8));
  l.wd = *g.AddInput("wd", kScalar, Initializer::Constant(0.1));
  l.no_wd = *g.AddConstant("wd.none", kScalar, Initializer::Zeros());
  l.clip = *g.AddInput("clip", kScalar, Initializer::Constant(0.5));
  l.max_norm = *g.AddInput("max_norm", kScalar, Initializer::Constant(0.5));
  l.check = *g.AddInput("check", {Shape{2}}, Initializer::Zeros());
  return l;
}

std::vector<Value> Concat(std::vector<Value> a, const std::vector<Value>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every tensor's w, m and v as raw bytes.
std::vector<std::string> State(ir::ReferenceExecutor& cpu) {
  std::vector<std::string> bytes;
  for (int t = 0; t < kTensors; ++t) {
    for (const char* suffix : {"", ".m", ".v"}) {
      const ir::HostTensor* x = *cpu.Leaf("t" + std::to_string(t) + suffix);
      bytes.emplace_back(static_cast<const char*>(x->raw()), x->spec().bytes());
    }
  }
  return bytes;
}

// Runs both graphs at each step of the counter (with `check` as loss scaling's check, when the
// graphs read it) and expects the same bits of every tensor after each.
void ExpectSameBits(const Graph& a, const Graph& b, bool float64, std::vector<double> check = {}) {
  ir::ReferenceExecutor x(a, float64, 11), y(b, float64, 11);
  const std::vector<std::string> before = State(x);
  for (int32_t step : {0, 3, 7, 40, 120}) {
    for (auto* cpu : {&x, &y}) {
      ASSERT_TRUE(cpu->SetLeaf("step", std::vector<int32_t>{step, 0}).ok());
      if (!check.empty()) ASSERT_TRUE(cpu->SetLeaf("check", check).ok());
      ASSERT_TRUE(cpu->Run().ok());
    }
    ASSERT_EQ(State(x), State(y)) << "step " << step;
  }
  // The steps changed something, unless the check skipped them all.
  const bool skipped = !check.empty() && check[1] != 0;
  EXPECT_EQ(State(x) == before, skipped);
}

TEST(AdamMultiTest, TensorsWithTheirOwnWeightDecayGiveTheSingleTensorBits) {
  for (bool decoupled : {false, true}) {
    for (bool clipped : {false, true}) {
      for (bool float64 : {false, true}) {
        Graph single, multi;
        const Leaves s = MakeLeaves(single), m = MakeLeaves(multi);
        std::vector<Value> per_tensor;
        for (int t = 0; t < kTensors; ++t) {
          std::vector<Value> in =
              Concat(s.tensors[t], {s.lr, s.step, s.beta1, s.beta2, s.eps, s.DecayOf(t)});
          if (clipped) in.push_back(s.clip);
          ASSERT_TRUE(
              single
                  .AddOp(ops::AdamOp(), "adam" + std::to_string(t), in, {{"decoupled", decoupled}})
                  .ok());
          per_tensor = Concat(per_tensor, Concat(m.tensors[t], {m.DecayOf(t)}));
        }
        std::vector<Value> shared = {m.lr, m.step, m.beta1, m.beta2, m.eps};
        if (clipped) shared.push_back(m.clip);
        auto added = multi.AddOp(ops::AdamMultiOp(), "adam.all", Concat(per_tensor, shared),
                                 {{"decoupled", decoupled}, {"tensors", int64_t{kTensors}}});
        ASSERT_TRUE(added.ok()) << added.status();
        SCOPED_TRACE(::testing::Message() << "decoupled " << decoupled << ", clipped " << clipped
                                          << ", float64 " << float64);
        ExpectSameBits(single, multi, float64);
      }
    }
  }
}

// The unfused step as the optimizer graph builds it, and the fused one as the fuse pass does.
void BuildFoldedAndUnfolded(Graph& unfused, Graph& fused, bool scaled) {
  const Leaves u = MakeLeaves(unfused), f = MakeLeaves(fused);
  Attrs adam_attrs = {{"decoupled", true}};
  Attrs norm_attrs;
  if (scaled) adam_attrs["loss_scaled"] = norm_attrs["loss_scaled"] = true;
  auto grads = [&](const Leaves& l) {
    std::vector<Value> g;
    for (const auto& t : l.tensors) g.push_back(t[1]);
    if (scaled) g.push_back(l.check);
    return g;
  };
  const Value rate = *unfused.AddOp1(ops::LrScheduleOp(), "rate", {u.lr, u.step}, Cosine());
  const Value partials = *unfused.AddOp1(ops::GradSumSquaresOp(), "partials", grads(u), norm_attrs);
  const Value coefficient =
      (*unfused.AddOp(ops::ClipCoefficientOp(), "norm", {partials, u.max_norm}))[1];
  for (int t = 0; t < kTensors; ++t) {
    std::vector<Value> in =
        Concat(u.tensors[t], {rate, u.step, u.beta1, u.beta2, u.eps, u.DecayOf(t), coefficient});
    if (scaled) in.push_back(u.check);
    ASSERT_TRUE(unfused.AddOp(ops::AdamOp(), "adam" + std::to_string(t), in, adam_attrs).ok());
  }
  const Value fused_partials =
      *fused.AddOp1(ops::GradSumSquaresOp(), "partials", grads(f), norm_attrs);
  std::vector<Value> in;
  for (int t = 0; t < kTensors; ++t) in = Concat(in, Concat(f.tensors[t], {f.DecayOf(t)}));
  in = Concat(in, {f.lr, f.step, f.beta1, f.beta2, f.eps, fused_partials, f.max_norm});
  if (scaled) in.push_back(f.check);
  Attrs attrs = Cosine();
  attrs.insert(adam_attrs.begin(), adam_attrs.end());
  attrs["tensors"] = int64_t{kTensors};
  attrs["clip_norm"] = true;
  auto added = fused.AddOp(ops::AdamMultiOp(), "adam.all", in, attrs);
  ASSERT_TRUE(added.ok()) << added.status();
}

TEST(AdamMultiTest, FoldedScheduleAndClipNormGiveTheUnfusedBits) {
  for (bool float64 : {false, true}) {
    SCOPED_TRACE(float64 ? "float64" : "float32");
    Graph unfused, fused;
    BuildFoldedAndUnfolded(unfused, fused, /*scaled=*/false);
    ExpectSameBits(unfused, fused, float64);
  }
}

TEST(AdamMultiTest, FoldedLossScaledStepsGiveTheUnfusedBitsAndSkipTogether) {
  for (bool skipped : {false, true}) {
    SCOPED_TRACE(skipped ? "skipped" : "unscaled by 1/4");
    Graph unfused, fused;
    BuildFoldedAndUnfolded(unfused, fused, /*scaled=*/true);
    ExpectSameBits(unfused, fused, /*float64=*/false, {0.25, skipped ? 1.0 : 0.0});
  }
}

TEST(AdamMultiTest, WritesEachTensorsWeightAndMoments) {
  Graph g;
  const Leaves l = MakeLeaves(g);
  std::vector<Value> in;
  for (int t = 0; t < 2; ++t) in = Concat(in, Concat(l.tensors[t], {l.wd}));
  in = Concat(in, {l.lr, l.step, l.beta1, l.beta2, l.eps});
  ASSERT_TRUE(g.AddOp(ops::AdamMultiOp(), "adam.all", in, {{"tensors", int64_t{2}}}).ok());
  EXPECT_THAT(ir::MutatedInputs(g.node(g.num_nodes() - 1)), ElementsAre(0, 2, 3, 5, 7, 8));
}

TEST(AdamMultiTest, ShapeRulesNameWhatIsWrong) {
  Graph g;
  const Leaves l = MakeLeaves(g);
  const std::vector<Value> shared = {l.lr, l.step, l.beta1, l.beta2, l.eps};
  const std::vector<Value> one = Concat(l.tensors[0], {l.wd});
  auto bad = g.AddOp(ops::AdamMultiOp(), "few", Concat(one, shared), {{"tensors", int64_t{2}}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("5 inputs per tensor"));
  // clip_norm without the partial sums and max_norm.
  bad = g.AddOp(ops::AdamMultiOp(), "no_partials", Concat(one, shared),
                {{"tensors", int64_t{1}}, {"clip_norm", true}});
  EXPECT_THAT(bad.status().message(), HasSubstr("partial sums, max_norm"));
  // Partial sums that are a scalar.
  bad = g.AddOp(ops::AdamMultiOp(), "scalar_partials", Concat(Concat(one, shared), {l.lr, l.lr}),
                {{"tensors", int64_t{1}}, {"clip_norm", true}});
  EXPECT_THAT(bad.status().message(), HasSubstr("clip norm: "));
  // A schedule whose cosine ends before its warm-up.
  Attrs schedule = Cosine();
  schedule["total_steps"] = int64_t{3};
  schedule["tensors"] = int64_t{1};
  bad = g.AddOp(ops::AdamMultiOp(), "short_cosine", Concat(one, shared), schedule);
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("schedule: "), HasSubstr("total_steps")));
  // A weight decay that is not a scalar names its tensor.
  const std::vector<Value> vector_decay = Concat(l.tensors[1], {l.check});
  bad = g.AddOp(ops::AdamMultiOp(), "vector_decay", Concat(Concat(one, vector_decay), shared),
                {{"tensors", int64_t{2}}});
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("tensor 1"), HasSubstr("hyperparameter")));
}

}  // namespace
}  // namespace reprise
