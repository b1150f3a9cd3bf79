// batch_norm_apply recomputes batch_norm_train's output from its saved statistics with the same
// bits (both layouts, float32 and float64); with residual and relu it gives add's and relu's bits;
// shapes that do not fit are refused by name; the GPU kernel source is well formed.
#include "src/ops/batch_norm_apply.h"

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ir/host_tensor.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

std::string LayoutString(Layout layout) { return std::string(LayoutName(layout)); }

// x -> batch_norm_train -> y, and y recomputed by batch_norm_apply from x and the saved
// statistics; with `residual`, both followed by add(·, r) and relu.
struct ApplyGraph {
  Graph g;
  Value y, recomputed;
};

ApplyGraph Build(Layout layout, bool residual) {
  ApplyGraph a;
  Graph& g = a.g;
  const Shape shape = layout == Layout::kNCHW ? Shape{3, 5, 4, 6} : Shape{3, 4, 6, 5};
  const TensorSpec per_channel{Shape{5}, DType::kFloat32};
  const Value x = *g.AddInput("x", {shape, DType::kFloat32});
  const Value r = *g.AddInput("r", {shape, DType::kFloat32});
  const Value gamma = *g.AddParameter("gamma", per_channel, Initializer::Uniform(0.5, 2));
  const Value beta = *g.AddParameter("beta", per_channel, Initializer::Uniform(-1, 1));
  const Value mean = *g.AddState("running_mean", per_channel, Initializer::Zeros());
  const Value var = *g.AddState("running_var", per_channel, Initializer::Constant(1));
  const Attrs attrs = {{"layout", LayoutString(layout)}, {"epsilon", 1e-5}};
  const std::vector<Value> bn =
      *g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var}, attrs);
  a.y = bn[0];
  Attrs apply_attrs = attrs;
  std::vector<Value> inputs = {x, gamma, beta, bn[1], bn[2]};
  if (residual) {
    a.y = *g.AddOp1(ops::ReluOp(), "relu", {*g.AddOp1(ops::AddOp(), "add", {a.y, r})});
    apply_attrs["residual"] = true;
    apply_attrs["relu"] = true;
    inputs.push_back(r);
  }
  a.recomputed = *g.AddOp1(ops::BatchNormApplyOp(), "apply", inputs, apply_attrs);
  return a;
}

class BatchNormApplyTest
    : public ::testing::TestWithParam<std::tuple<Layout, bool /*residual*/, bool /*float64*/>> {};

TEST_P(BatchNormApplyTest, RecomputesTheForwardBitForBit) {
  const auto [layout, residual, float64] = GetParam();
  ApplyGraph a = Build(layout, residual);
  ir::ReferenceExecutor cpu(a.g, float64, 5);
  std::mt19937 rng(1);
  std::normal_distribution<double> normal(0.3, 2.0);
  for (const char* name : {"x", "r"}) {
    std::vector<double> data((*cpu.Leaf(name))->size());
    for (double& v : data) v = normal(rng);
    ASSERT_TRUE(cpu.SetLeaf(name, data).ok());
  }
  ASSERT_TRUE(cpu.Run().ok());
  const ir::HostTensor& y = **cpu.Tensor(a.y);
  const ir::HostTensor& recomputed = **cpu.Tensor(a.recomputed);
  int negatives = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    if (float64) {
      ASSERT_EQ(y.data<double>()[i], recomputed.data<double>()[i]) << i;
    } else {
      ASSERT_EQ(y.data<float>()[i], recomputed.data<float>()[i]) << i;
    }
    negatives += (float64 ? y.data<double>()[i] : y.data<float>()[i]) < 0;
  }
  EXPECT_EQ(negatives > 0, !residual);  // The ReLU ran where it should.
}

INSTANTIATE_TEST_SUITE_P(LayoutsResidualsAndPrecisions, BatchNormApplyTest,
                         ::testing::Combine(::testing::Values(Layout::kNCHW, Layout::kNHWC),
                                            ::testing::Bool(), ::testing::Bool()));

// batch_norm_apply_chain against the separate ops it replaces: s0 = apply(x0), then
// v = relu(apply(x) + previous) per later step, each output with their bits.
class BatchNormApplyChainTest : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(BatchNormApplyChainTest, GivesTheSeparateOpsBits) {
  const auto [layout, float64] = GetParam();
  Graph g;
  const Shape shape = layout == Layout::kNCHW ? Shape{2, 5, 3, 4} : Shape{2, 3, 4, 5};
  const TensorSpec per_channel{Shape{5}, DType::kFloat32};
  const Attrs attrs = {{"layout", LayoutString(layout)}};
  std::vector<Value> chain_inputs, separate;
  Value previous;
  for (int s = 0; s < 4; ++s) {
    const std::string n = std::to_string(s);
    const std::vector<Value> step = {
        *g.AddInput("x" + n, {shape, DType::kFloat32}),
        *g.AddParameter("gamma" + n, per_channel, Initializer::Uniform(0.5, 2)),
        *g.AddParameter("beta" + n, per_channel, Initializer::Uniform(-1, 1)),
        *g.AddParameter("mean" + n, per_channel, Initializer::Uniform(-0.5, 0.5)),
        *g.AddParameter("invstd" + n, per_channel, Initializer::Uniform(0.5, 2))};
    chain_inputs.insert(chain_inputs.end(), step.begin(), step.end());
    const Value applied = *g.AddOp1(ops::BatchNormApplyOp(), "apply" + n, step, attrs);
    previous = s == 0 ? applied
                      : *g.AddOp1(ops::ReluOp(), "relu" + n,
                                  {*g.AddOp1(ops::AddOp(), "add" + n, {applied, previous})});
    if (s > 0) separate.push_back(previous);
  }
  auto chained = g.AddOp(ops::BatchNormApplyChainOp(), "chain", chain_inputs, attrs);
  ASSERT_TRUE(chained.ok()) << chained.status();
  ASSERT_EQ(chained->size(), 3u);
  ir::ReferenceExecutor cpu(g, float64, 5);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0.0, 2.0);
  for (int s = 0; s < 4; ++s) {
    const std::string name = "x" + std::to_string(s);
    std::vector<double> data((*cpu.Leaf(name))->size());
    for (double& v : data) v = normal(rng);
    ASSERT_TRUE(cpu.SetLeaf(name, data).ok());
  }
  ASSERT_TRUE(cpu.Run().ok());
  for (int s = 0; s < 3; ++s) {
    const ir::HostTensor& want = **cpu.Tensor(separate[s]);
    const ir::HostTensor& got = **cpu.Tensor((*chained)[s]);
    int zeros = 0;
    for (int64_t i = 0; i < want.size(); ++i) {
      if (float64) {
        ASSERT_EQ(want.data<double>()[i], got.data<double>()[i]) << s << " " << i;
      } else {
        ASSERT_EQ(want.data<float>()[i], got.data<float>()[i]) << s << " " << i;
      }
      zeros += (float64 ? got.data<double>()[i] : got.data<float>()[i]) == 0;
    }
    EXPECT_GT(zeros, 0) << "step " << s + 1 << "'s ReLU";
  }
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndPrecisions, BatchNormApplyChainTest,
                         ::testing::Combine(::testing::Values(Layout::kNCHW, Layout::kNHWC),
                                            ::testing::Bool()));

TEST(BatchNormApplyShapeTest, ChainRefusesBadStepsByName) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{2, 3, 3, 4}, DType::kFloat32});
  const Value other = *g.AddInput("other", {Shape{2, 3, 3, 8}, DType::kFloat32});
  const Value c = *g.AddInput("c", {Shape{4}, DType::kFloat32});
  const Attrs nhwc = {{"layout", std::string("NHWC")}};
  auto one_step = g.AddOp(ops::BatchNormApplyChainOp(), "one", {x, c, c, c, c}, nhwc);
  EXPECT_EQ(one_step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(one_step.status().message(), HasSubstr("2 to 8 steps of 5 inputs"));
  auto ragged = g.AddOp(ops::BatchNormApplyChainOp(), "ragged", {x, c, c, c, c, x, c}, nhwc);
  EXPECT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
  auto mismatched =
      g.AddOp(ops::BatchNormApplyChainOp(), "mismatched", {x, c, c, c, c, other, c, c, c, c}, nhwc);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("step 1's x"));
  std::vector<Value> nine;
  for (int s = 0; s < 9; ++s) nine.insert(nine.end(), {x, c, c, c, c});
  EXPECT_EQ(g.AddOp(ops::BatchNormApplyChainOp(), "nine", nine, nhwc).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BatchNormApplyShapeTest, RefusesStatisticsOfTheWrongChannelCount) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{2, 4, 3, 3}, DType::kFloat32});
  const Value c4 = *g.AddInput("c4", {Shape{4}, DType::kFloat32});
  const Value c3 = *g.AddInput("c3", {Shape{3}, DType::kFloat32});
  auto bad = g.AddOp1(ops::BatchNormApplyOp(), "apply", {x, c4, c4, c3, c4});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("saved_mean must be f32[4]"));
  auto no_residual =
      g.AddOp1(ops::BatchNormApplyOp(), "apply2", {x, c4, c4, c4, c4}, {{"residual", true}});
  EXPECT_EQ(no_residual.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reprise
