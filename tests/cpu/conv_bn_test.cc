// conv2d_bn_train's shape rule and CPU reference: its four outputs are those of conv2d followed by
// batch_norm_train (or batch_norm_act_train with the residual add) bit for bit, running statistics
// included; malformed nodes are refused naming what is wrong.
#include "src/ops/conv_bn.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/conv.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct Leaves {
  Value x, w, gamma, beta, mean, var, residual;
};

// Data as constants (parameters are float32; mixed precision casts them), per-channel tensors as
// the batch norm's parameters and state.
Leaves AddLeaves(Graph& g, Layout layout, DType dtype) {
  const bool nhwc = layout == Layout::kNHWC;
  const Shape image = nhwc ? Shape{2, 6, 6, 4} : Shape{2, 4, 6, 6};
  const Shape out = nhwc ? Shape{2, 6, 6, 8} : Shape{2, 8, 6, 6};
  Leaves l;
  l.x = *g.AddConstant("x", {image, dtype}, Initializer::Uniform(-1, 2));
  l.w = *g.AddConstant("w", {nhwc ? Shape{8, 3, 3, 4} : Shape{8, 4, 3, 3}, dtype},
                       Initializer::Uniform(-0.5, 0.5));
  l.gamma = *g.AddParameter("gamma", {Shape{8}}, Initializer::Uniform(0.5, 1.5));
  l.beta = *g.AddParameter("beta", {Shape{8}}, Initializer::Uniform(-1, 1));
  l.mean = *g.AddState("running_mean", {Shape{8}}, Initializer::Uniform(-1, 1));
  l.var = *g.AddState("running_var", {Shape{8}}, Initializer::Uniform(0.5, 2));
  l.residual = *g.AddConstant("residual", {out, dtype}, Initializer::Uniform(-1, 1));
  return l;
}

Attrs AttrsFor(Layout layout, bool relu, bool residual) {
  return {{"layout", std::string(LayoutName(layout))},
          {"pad_h", int64_t{1}},
          {"pad_w", int64_t{1}},
          {"epsilon", 1e-5},
          {"momentum", 0.1},
          {"relu", relu},
          {"residual", residual}};
}

class ConvBnTest : public ::testing::TestWithParam<std::tuple<Layout, DType>> {};

TEST_P(ConvBnTest, ReferenceIsTheSeparateOpsBitForBit) {
  const auto [layout, dtype] = GetParam();
  for (const bool relu : {false, true}) {
    const bool residual = relu;
    SCOPED_TRACE(relu ? "with residual and relu" : "plain");
    Graph fused, separate;
    const Leaves f = AddLeaves(fused, layout, dtype), s = AddLeaves(separate, layout, dtype);
    const Attrs attrs = AttrsFor(layout, relu, residual);
    std::vector<Value> inputs = {f.x, f.w, f.gamma, f.beta, f.mean, f.var};
    if (residual) inputs.push_back(f.residual);
    auto out = fused.AddOp(ops::Conv2dBatchNormTrainOp(), "conv_bn", inputs, attrs);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 4u);
    auto y = separate.AddOp1(ops::Conv2dOp(), "conv", {s.x, s.w}, attrs);
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<Value> bn_in = {*y, s.gamma, s.beta, s.mean, s.var};
    if (residual) bn_in.push_back(s.residual);
    auto bn = separate.AddOp(relu ? ops::BatchNormActTrainOp() : ops::BatchNormTrainOp(), "bn",
                             bn_in, attrs);
    ASSERT_TRUE(bn.ok()) << bn.status();
    ir::ReferenceExecutor a(fused, false, 5), b(separate, false, 5);
    ASSERT_TRUE(a.Run().ok());
    ASSERT_TRUE(b.Run().ok());
    const std::vector<std::pair<Value, Value>> pairs = {
        {(*out)[0], (*bn)[0]}, {(*out)[1], (*bn)[1]}, {(*out)[2], (*bn)[2]},
        {(*out)[3], *y},       {f.mean, s.mean},      {f.var, s.var}};
    for (const auto& [got, want] : pairs) {
      const ir::HostTensor* g = *a.Tensor(got);
      const ir::HostTensor* w = *b.Tensor(want);
      ASSERT_EQ(g->spec(), w->spec());
      const auto* gb = static_cast<const uint8_t*>(g->raw());
      const auto* wb = static_cast<const uint8_t*>(w->raw());
      EXPECT_EQ(std::vector<uint8_t>(gb, gb + g->spec().bytes()),
                std::vector<uint8_t>(wb, wb + w->spec().bytes()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndTypes, ConvBnTest,
                         ::testing::Combine(::testing::Values(Layout::kNCHW, Layout::kNHWC),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const auto& info) {
                           return absl::StrCat(LayoutName(std::get<0>(info.param)), "_",
                                               DTypeName(std::get<1>(info.param)));
                         });

TEST(ConvBnShapeTest, RefusesMalformedNodes) {
  Graph g;
  const Leaves l = AddLeaves(g, Layout::kNCHW, DType::kFloat32);
  const std::vector<Value> six = {l.x, l.w, l.gamma, l.beta, l.mean, l.var};
  auto residual_without_relu =
      g.AddOp(ops::Conv2dBatchNormTrainOp(), "a", six, AttrsFor(Layout::kNCHW, false, true));
  EXPECT_EQ(residual_without_relu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(residual_without_relu.status().message(), HasSubstr("relu"));
  auto missing_residual =
      g.AddOp(ops::Conv2dBatchNormTrainOp(), "b", six, AttrsFor(Layout::kNCHW, true, true));
  EXPECT_EQ(missing_residual.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_gamma =
      g.AddOp(ops::Conv2dBatchNormTrainOp(), "c", {l.x, l.w, l.x, l.beta, l.mean, l.var},
              AttrsFor(Layout::kNCHW, false, false));
  EXPECT_FALSE(wrong_gamma.ok());
}

}  // namespace
}  // namespace reprise
