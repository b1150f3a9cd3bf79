// max_pool2d_bn_relu and max_pool2d_grad_bn_relu (src/ops/pooling_bn_relu.h): on the CPU
// reference they give the bits of batch_norm_apply with ReLU followed by max_pool2d and its
// gradient, in float32 and float64; bad inputs are refused with what was expected.
#include "src/ops/pooling_bn_relu.h"

#include <cstring>
#include <string>
#include <utility>

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
  Stem() {
    const TensorSpec channel{Shape{8}};
    x = *g.AddParameter("x", {Shape{2, 9, 7, 8}}, Initializer::Uniform(-2, 2));
    gamma = *g.AddParameter("gamma", channel, Initializer::Uniform(0.5, 2));
    beta = *g.AddParameter("beta", channel, Initializer::Uniform(-1, 1));
    mean = *g.AddParameter("mean", channel, Initializer::Uniform(-0.5, 0.5));
    invstd = *g.AddParameter("invstd", channel, Initializer::Uniform(0.5, 3));
    dy = *g.AddParameter("dy", {Shape{2, 5, 4, 8}}, Initializer::Uniform(-1, 1));
  }
};

TEST(PoolingBnReluTest, GivesTheSeparateOpsBits) {
  Stem s;
  Graph& g = s.g;
  const Value fused = *g.AddOp1(ops::MaxPool2dBnReluOp(), "fused",
                                {s.x, s.gamma, s.beta, s.mean, s.invstd}, PoolAttrs());
  const Value fused_grad = *g.AddOp1(ops::MaxPool2dGradBnReluOp(), "fused_grad",
                                     {s.dy, s.x, s.gamma, s.beta, s.mean, s.invstd}, PoolAttrs());
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
  }
}

TEST(PoolingBnReluTest, RefusesBadInputs) {
  Stem s;
  auto wrong_dy = s.g.AddOp1(ops::MaxPool2dGradBnReluOp(), "grad",
                             {s.x, s.x, s.gamma, s.beta, s.mean, s.invstd}, PoolAttrs());
  EXPECT_THAT(wrong_dy.status().message(), HasSubstr("must be f32[2, 5, 4, 8], the pooled x"));
  auto missing =
      s.g.AddOp1(ops::MaxPool2dBnReluOp(), "pool", {s.x, s.gamma, s.beta, s.mean}, PoolAttrs());
  EXPECT_FALSE(missing.ok());
  auto wrong_channels = s.g.AddOp1(ops::MaxPool2dBnReluOp(), "pool",
                                   {s.x, s.dy, s.beta, s.mean, s.invstd}, PoolAttrs());
  EXPECT_THAT(wrong_channels.status().message(), HasSubstr("gamma must be"));
}

}  // namespace
}  // namespace reprise
