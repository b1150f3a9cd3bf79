// The adam op and the Nesterov / clipped forms of sgd_momentum: shape rules and one step of the
// CPU reference against the formulas in double. (adam_multi: adam_multi_test.cc.)
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

const TensorSpec kScalar{Shape{}, DType::kFloat32};

Initializer Random() { return Initializer::Uniform(-1, 1); }

// (w, g, m, v) for tensor `name` and the shared inputs of an adam node.
struct AdamGraph {
  Graph g;
  std::vector<Value> shared;
  std::vector<Value> Tensor(const std::string& name, Shape shape) {
    return {*g.AddParameter(name, {shape}, Random()),
            *g.AddConstant(name + ".g", {shape}, Random()),
            *g.AddState(name + ".m", {shape}, Random()),
            *g.AddState(name + ".v", {shape}, Initializer::Uniform(0, 1))};
  }
};

AdamGraph MakeAdamGraph(bool clipped) {
  AdamGraph a;
  Graph& g = a.g;
  a.shared = {*g.AddInput("lr", kScalar, Initializer::Constant(0.01)),
              *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros()),
              *g.AddInput("beta1", kScalar, Initializer::Constant(0.9)),
              *g.AddInput("beta2", kScalar, Initializer::Constant(0.999)),
              *g.AddInput("eps", kScalar, Initializer::Constant(1e-8)),
              *g.AddInput("wd", kScalar, Initializer::Constant(0.1))};
  if (clipped) a.shared.push_back(*g.AddInput("clip", kScalar, Initializer::Constant(0.5)));
  return a;
}

std::vector<Value> Concat(std::vector<Value> a, const std::vector<Value>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<double> Values(ir::ReferenceExecutor& cpu, const std::string& name) {
  const ir::HostTensor* t = *cpu.Leaf(name);
  std::vector<double> out;
  for (int64_t i = 0; i < t->size(); ++i) {
    out.push_back(t->dtype() == DType::kFloat64 ? t->data<double>()[i] : t->data<float>()[i]);
  }
  return out;
}

TEST(AdamTest, OneStepMatchesTheFormulasWithBiasCorrectionFromTheCounter) {
  for (bool decoupled : {false, true}) {
    AdamGraph a = MakeAdamGraph(/*clipped=*/true);
    auto in = Concat(a.Tensor("w", Shape{37}), a.shared);
    ASSERT_TRUE(a.g.AddOp(ops::AdamOp(), "adam", in, {{"decoupled", decoupled}}).ok());
    ir::ReferenceExecutor cpu(a.g, /*float64=*/true, 3);
    ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{9, 0}).ok());  // Update 10.
    const auto w0 = Values(cpu, "w"), g = Values(cpu, "w.g"), m0 = Values(cpu, "w.m"),
               v0 = Values(cpu, "w.v");
    ASSERT_TRUE(cpu.Run().ok());
    const auto w = Values(cpu, "w"), m = Values(cpu, "w.m"), v = Values(cpu, "w.v");
    const double lr = Values(cpu, "lr")[0], b1 = Values(cpu, "beta1")[0],
                 b2 = Values(cpu, "beta2")[0], eps = Values(cpu, "eps")[0],
                 wd = Values(cpu, "wd")[0], clip = Values(cpu, "clip")[0];
    for (int i = 0; i < 37; ++i) {
      double d = clip * g[i], x = w0[i];
      if (decoupled) {
        x -= lr * wd * x;
      } else {
        d += wd * w0[i];
      }
      const double mm = b1 * m0[i] + (1 - b1) * d, vv = b2 * v0[i] + (1 - b2) * d * d;
      const double want =
          x - lr * (mm / (1 - std::pow(b1, 10))) / (std::sqrt(vv / (1 - std::pow(b2, 10))) + eps);
      EXPECT_NEAR(m[i], mm, 1e-15);
      EXPECT_NEAR(v[i], vv, 1e-15);
      EXPECT_NEAR(w[i], want, 1e-13) << i;
    }
  }
}

TEST(AdamTest, ShapeRulesNameWhatIsWrong) {
  AdamGraph a = MakeAdamGraph(false);
  auto in = Concat(a.Tensor("w", Shape{4}), a.shared);
  in[2] = *a.g.AddState("m_wrong", {Shape{5}}, Initializer::Zeros());
  auto bad = a.g.AddOp(ops::AdamOp(), "adam", in);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("must match"));
  in = Concat(a.Tensor("x", Shape{4}), a.shared);
  in[5] = *a.g.AddInput("float_step", {Shape{2}}, Initializer::Zeros());
  bad = a.g.AddOp(ops::AdamOp(), "adam2", in);
  EXPECT_THAT(bad.status().message(), HasSubstr("step counter must be i32[2]"));
  in.pop_back();
  bad = a.g.AddOp(ops::AdamOp(), "adam3", in);
  EXPECT_THAT(bad.status().message(), HasSubstr("expected 10 inputs"));
}

TEST(SgdNesterovTest, OneClippedNesterovStepMatchesTheFormula) {
  Graph g;
  Value w = *g.AddParameter("w", {Shape{50}}, Random());
  Value grad = *g.AddConstant("g", {Shape{50}}, Random());
  Value v = *g.AddState("v", {Shape{50}}, Random());
  std::vector<Value> in = {w, grad, v};
  for (auto [name, value] : {std::pair{"lr", 0.1}, {"mu", 0.9}, {"wd", 0.01}, {"clip", 0.25}}) {
    in.push_back(*g.AddInput(name, kScalar, Initializer::Constant(value)));
  }
  ASSERT_TRUE(g.AddOp(ops::SgdMomentumOp(), "sgd", in, {{"nesterov", true}}).ok());
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 2);
  const auto w0 = Values(cpu, "w"), g0 = Values(cpu, "g"), v0 = Values(cpu, "v");
  ASSERT_TRUE(cpu.Run().ok());
  const auto w1 = Values(cpu, "w"), v1 = Values(cpu, "v");
  const double lr = Values(cpu, "lr")[0], mu = Values(cpu, "mu")[0], wd = Values(cpu, "wd")[0],
               clip = Values(cpu, "clip")[0];
  for (int i = 0; i < 50; ++i) {
    const double d = clip * g0[i] + wd * w0[i];
    const double b = mu * v0[i] + d;
    EXPECT_NEAR(v1[i], b, 1e-15);
    EXPECT_NEAR(w1[i], w0[i] - lr * (d + mu * b), 1e-15);
  }
}

}  // namespace
}  // namespace reprise
