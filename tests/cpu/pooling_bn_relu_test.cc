// max_pool2d_bn_relu, max_pool2d_with_argmax and max_pool2d_grad_from_argmax
// (src/ops/pooling_bn_relu.h): on the CPU reference they give the bits of (batch_norm_apply with
// ReLU followed by) max_pool2d and its gradient, in float32, float64 and bfloat16; bad inputs are
// refused with what was expected.
#include "src/ops/pooling_bn_relu.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/pooling.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

Attrs PoolAttrs() {
  return {{"kernel_h", int64_t{3}},       {"kernel_w", int64_t{3}}, {"stride_h", int64_t{2}},
          {"stride_w", int64_t{2}},       {"pad_h", int64_t{1}},    {"pad_w", int64_t{1}},
          {"layout", std::string("NHWC")}};
}

struct Stem {
  Graph g;
  Value x, gamma, beta, mean, invstd, dy;
  // `dtype`: of x, dy and the outputs; the per-channel tensors stay float32 (mixed precision's).
  explicit Stem(DType dtype = DType::kFloat32) {
    const TensorSpec channel{Shape{8}};
    x = *g.AddConstant("x", {Shape{2, 9, 7, 8}, dtype}, Initializer::Uniform(-2, 2));
    // In 16 bits, gamma · (x - mean) + beta lands within half a step of 1 for every x: distinct
    // floats that round to one value, so only the rounded ReLU output gives the separate ops'
    // argmax (the first element of each window).
    const bool narrow = dtype != DType::kFloat32;
    auto per_channel = [&](const char* name, double low, double high, double narrow_value) {
      return *g.AddParameter(
          name, channel,
          narrow ? Initializer::Constant(narrow_value) : Initializer::Uniform(low, high));
    };
    gamma = per_channel("gamma", 0.5, 2, 1e-3);
    beta = per_channel("beta", -1, 1, 1);
    mean = per_channel("mean", -0.5, 0.5, 0);
    invstd = per_channel("invstd", 0.5, 3, 1);
    dy = *g.AddConstant("dy", {Shape{2, 5, 4, 8}, dtype}, Initializer::Uniform(-1, 1));
  }
};

class PoolingBnReluTest : public ::testing::TestWithParam<DType> {};

// bfloat16: the reference executor runs each op in float32 and rounds its outputs, so the fused
// ops round the recomputed ReLU output as the separate batch_norm_apply's would be.
TEST_P(PoolingBnReluTest, GivesTheSeparateOpsBits) {
  Stem s(GetParam());
  Graph& g = s.g;
  const std::vector<Value> fused_pool = *g.AddOp(
      ops::MaxPool2dBnReluOp(), "fused", {s.x, s.gamma, s.beta, s.mean, s.invstd}, PoolAttrs());
  const Value fused = fused_pool[0], argmax = fused_pool[1];
  EXPECT_EQ(g.spec(argmax), (TensorSpec{Shape{2, 5, 4, 2}, DType::kInt32}));
  const Value fused_grad =
      *g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "fused_grad", {s.dy, argmax, s.x}, PoolAttrs());
  const Value a =
      *g.AddOp1(ops::BatchNormApplyOp(), "apply", {s.x, s.gamma, s.beta, s.mean, s.invstd},
                {{"layout", std::string("NHWC")}, {"relu", true}});
  const Value pooled = *g.AddOp1(ops::MaxPool2dOp(), "pool", {a}, PoolAttrs());
  const Value grad = *g.AddOp1(ops::MaxPool2dGradOp(), "grad", {s.dy, a, pooled}, PoolAttrs());
  for (bool float64 : {false, true}) {
    ir::ReferenceExecutor cpu(g, float64, 3);
    ASSERT_TRUE(cpu.Run().ok());
    for (const auto& [one, other] : {std::pair{fused, pooled}, std::pair{fused_grad, grad}}) {
      const ir::HostTensor* u = *cpu.Tensor(one);
      const ir::HostTensor* v = *cpu.Tensor(other);
      ASSERT_EQ(u->spec(), v->spec());
      EXPECT_EQ(std::memcmp(u->raw(), v->raw(), u->spec().bytes()), 0)
          << g.node(one.node).name << (float64 ? " in float64" : " in float32");
    }
    // A 3x3 window's index, and not always its first element.
    const ir::HostTensor* indices = *cpu.Tensor(argmax);
    const auto* bytes = static_cast<const unsigned char*>(indices->raw());
    int later = 0;
    for (int64_t i = 0; i < indices->spec().bytes(); ++i) {
      EXPECT_LT(bytes[i], 9);
      later += bytes[i] > 0;
    }
    if (GetParam() == DType::kFloat32) EXPECT_GT(later, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, PoolingBnReluTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// max_pool2d_with_argmax gives max_pool2d's y, and the gradient from its argmax gives
// max_pool2d_grad's dx, bit for bit: with ties (small integers), signed zeros and NaNs, where the
// first element equal to the maximum (NaN matching NaN) takes the window's gradient.
TEST(PoolingWithArgmaxTest, GivesMaxPoolingsBits) {
  Stem s;
  Graph& g = s.g;
  const std::vector<Value> with_argmax =
      *g.AddOp(ops::MaxPool2dWithArgmaxOp(), "with_argmax", {s.x}, PoolAttrs());
  EXPECT_EQ(g.spec(with_argmax[1]), (TensorSpec{Shape{2, 5, 4, 2}, DType::kInt32}));
  const Value from_argmax = *g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "from_argmax",
                                      {s.dy, with_argmax[1], s.x}, PoolAttrs());
  const Value pooled = *g.AddOp1(ops::MaxPool2dOp(), "pool", {s.x}, PoolAttrs());
  const Value grad = *g.AddOp1(ops::MaxPool2dGradOp(), "grad", {s.dy, s.x, pooled}, PoolAttrs());
  for (bool float64 : {false, true}) {
    ir::ReferenceExecutor cpu(g, float64, 3);
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> small(-2, 1), pick(0, 30);
    std::vector<double> values(g.spec(s.x).NumElements());
    for (double& v : values) {
      const int p = pick(rng);
      v = p == 0 ? std::nan("") : p == 1 ? -0.0 : small(rng);
    }
    ASSERT_TRUE(cpu.SetLeaf("x", values).ok());
    ASSERT_TRUE(cpu.Run().ok());
    for (const auto& [one, other] :
         {std::pair{with_argmax[0], pooled}, std::pair{from_argmax, grad}}) {
      const ir::HostTensor* u = *cpu.Tensor(one);
      const ir::HostTensor* v = *cpu.Tensor(other);
      ASSERT_EQ(u->spec(), v->spec());
      EXPECT_EQ(std::memcmp(u->raw(), v->raw(), u->spec().bytes()), 0)
          << g.node(one.node).name << (float64 ? " in float64" : " in float32");
    }
  }
  Attrs nchw_attrs = PoolAttrs();
  nchw_attrs["layout"] = std::string("NCHW");
  auto nchw = g.AddOp(ops::MaxPool2dWithArgmaxOp(), "nchw", {s.x}, nchw_attrs);
  EXPECT_THAT(nchw.status().message(), HasSubstr("channels-last"));
}

TEST(PoolingBnReluInputsTest, RefusesBadInputs) {
  Stem s;
  const std::vector<Value> pool = *s.g.AddOp(ops::MaxPool2dBnReluOp(), "good_pool",
                                             {s.x, s.gamma, s.beta, s.mean, s.invstd}, PoolAttrs());
  auto wrong_dy =
      s.g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "grad", {s.x, pool[1], s.x}, PoolAttrs());
  EXPECT_THAT(wrong_dy.status().message(),
              HasSubstr("must be f32[2, 5, 4, 8] and i32[2, 5, 4, 2], the pooled x"));
  auto wrong_argmax =
      s.g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "grad", {s.dy, s.dy, s.x}, PoolAttrs());
  EXPECT_THAT(wrong_argmax.status().message(), HasSubstr("and argmax f32[2, 5, 4, 8] must be"));
  auto missing =
      s.g.AddOp1(ops::MaxPool2dBnReluOp(), "pool", {s.x, s.gamma, s.beta, s.mean}, PoolAttrs());
  EXPECT_FALSE(missing.ok());
  auto wrong_channels = s.g.AddOp1(ops::MaxPool2dBnReluOp(), "pool",
                                   {s.x, s.dy, s.beta, s.mean, s.invstd}, PoolAttrs());
  EXPECT_THAT(wrong_channels.status().message(), HasSubstr("gamma must be"));
  // The argmax packs four channels of channels-last data to an int32: 6 channels do not divide.
  Graph six;
  const Value x6 = *six.AddConstant("x", {Shape{2, 9, 7, 6}}, Initializer::Uniform(-2, 2));
  std::vector<Value> bn = {x6};
  for (const char* name : {"gamma", "beta", "mean", "invstd"}) {
    bn.push_back(*six.AddParameter(name, TensorSpec{Shape{6}}, Initializer::Constant(1)));
  }
  auto odd = six.AddOp(ops::MaxPool2dBnReluOp(), "pool", bn, PoolAttrs());
  EXPECT_THAT(odd.status().message(), HasSubstr("packs four channels to an int32"));
}

// An argmax that names no element of x inside its window (here 200 of a 3x3 window, or a padded
// corner) is refused, naming the node, instead of sending dy elsewhere.
TEST(PoolingBnReluInputsTest, RefusesAnArgmaxOutsideItsWindow) {
  for (int index : {200, 0}) {  // Window (0, 0)'s element 0 is padding (pad 1).
    Stem s;
    const Value argmax = *s.g.AddConstant("argmax", {Shape{2, 5, 4, 2}, DType::kInt32},
                                          Initializer::Constant(index));
    ASSERT_TRUE(
        s.g.AddOp1(ops::MaxPool2dGradFromArgmaxOp(), "grad", {s.dy, argmax, s.x}, PoolAttrs())
            .ok());
    ir::ReferenceExecutor cpu(s.g, false, 3);
    const absl::Status run = cpu.Run();
    EXPECT_THAT(run.message(), HasSubstr("node 'grad': argmax"));
    EXPECT_THAT(run.message(), HasSubstr(absl::StrCat("argmax ", index, " of window (0, 0)")));
  }
}

}  // namespace
}  // namespace reprise
