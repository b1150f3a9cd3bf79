// Pooling, flatten and reshape on the CPU reference: gradients against float64 finite
// differences in both layouts, max pooling's tie, padding and NaN rules, NHWC against NCHW
// transposed (batch norm included), shape errors, and the NVRTC kernels compiling.
#include "src/ops/pooling.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/pooling_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;
using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

Shape ImageShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c};
}

Attrs PoolAttrs(int64_t kernel, int64_t stride, int64_t pad, Layout layout = Layout::kNCHW) {
  return {{"kernel_h", kernel},
          {"kernel_w", kernel},
          {"stride_h", stride},
          {"stride_w", stride},
          {"pad_h", pad},
          {"pad_w", pad},
          {"layout", std::string(LayoutName(layout))}};
}

// Ends `features` in flatten -> matmul -> softmax cross-entropy over 3 classes (batch 3).
Value Loss(Graph& g, Value features) {
  Value flat = *g.AddOp1(ops::FlattenOp(), "flatten", {features});
  Value w = *g.AddParameter("head", {Shape{g.spec(flat).shape.dim(1), 3}}, TestInit());
  Value logits = *g.AddOp1(ops::MatmulOp(), "head_mm", {flat, w});
  Value labels = *g.AddInput("labels", {Shape{3}, DType::kInt32});
  return *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
}

const std::vector<int32_t> kLabels = {2, 0, 1};

class PoolingLayoutTest : public ::testing::TestWithParam<Layout> {};

// Uniform random x has no ties (with this seed, none within the finite-difference step either).
TEST_P(PoolingLayoutTest, MaxPoolGradientMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {ImageShape(GetParam(), 3, 4, 5, 5)}, TestInit());
  auto y = g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, PoolAttrs(3, 2, 1, GetParam()));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).shape, ImageShape(GetParam(), 3, 4, 3, 3));
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *y), kLabels, 21);
}

TEST_P(PoolingLayoutTest, GlobalAvgPoolGradientMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {ImageShape(GetParam(), 3, 4, 5, 5)}, TestInit());
  auto y = g.AddOp1(ops::GlobalAvgPoolOp(), "gap", {x},
                    {{"layout", std::string(LayoutName(GetParam()))}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).shape, (Shape{3, 4}));
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *y), kLabels, 22);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, PoolingLayoutTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

TEST(ReshapeTest, ReshapeGradientMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{3, 2, 2, 5}}, TestInit());
  auto y = g.AddOp1(ops::ReshapeOp(), "reshape", {x}, {{"shape", std::string("3, 4, 5")}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).shape, (Shape{3, 4, 5}));
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *y), kLabels, 23);  // Flatten, then matmul.
}

// Runs a one-op graph on x (float64) and returns output 0.
std::vector<double> RunOne(const ir::OpDef& op, const Shape& shape, std::vector<double> x,
                           const Attrs& attrs) {
  Graph g;
  Value in = *g.AddInput("x", {shape});
  auto y = g.AddOp1(op, "op", {in}, attrs);
  EXPECT_TRUE(y.ok()) << y.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 0);
  EXPECT_TRUE(cpu.SetLeaf("x", x).ok());
  EXPECT_TRUE(cpu.Run().ok());
  auto out = (*cpu.Tensor(*y))->data<double>();
  return {out.begin(), out.end()};
}

// (dy, x, y) -> dx of a max pool over x [1, 1, h, w].
std::vector<double> MaxPoolGrad(std::vector<double> x, int64_t h, int64_t w, std::vector<double> dy,
                                const Attrs& attrs) {
  Graph g;
  Value xv = *g.AddInput("x", {Shape{1, 1, h, w}});
  Value y = *g.AddOp1(ops::MaxPool2dOp(), "pool", {xv}, attrs);
  Value dyv = *g.AddInput("dy", g.spec(y));
  Value dx = *g.AddOp1(ops::MaxPool2dGradOp(), "pool_grad", {dyv, xv, y}, attrs);
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 0);
  EXPECT_TRUE(cpu.SetLeaf("x", x).ok());
  EXPECT_TRUE(cpu.SetLeaf("dy", dy).ok());
  EXPECT_TRUE(cpu.Run().ok());
  auto out = (*cpu.Tensor(dx))->data<double>();
  return {out.begin(), out.end()};
}

TEST(MaxPoolTest, TiesSendTheGradientToTheFirstMaximum) {
  // x = [[1, 3, 3], [3, 0, 2], [1, 1, 1]], 2x2 windows, stride 1.
  const std::vector<double> x = {1, 3, 3, 3, 0, 2, 1, 1, 1};
  EXPECT_THAT(RunOne(ops::MaxPool2dOp(), Shape{1, 1, 3, 3}, x, PoolAttrs(2, 1, 0)),
              ElementsAre(3, 3, 3, 2));
  // Windows (0,0) and (0,1) both pick x[0][1]; window (1,0) picks x[1][0]; (1,1) picks x[1][2].
  EXPECT_THAT(MaxPoolGrad(x, 3, 3, {1, 2, 4, 8}, PoolAttrs(2, 1, 0)),
              ElementsAre(0, 3, 0, 4, 0, 8, 0, 0, 0));
}

TEST(MaxPoolTest, PaddingIsMinusInfinity) {
  // All-negative x: zero padding would give 0; -inf padding gives each window's true maximum.
  EXPECT_THAT(RunOne(ops::MaxPool2dOp(), Shape{1, 1, 2, 2}, {-5, -6, -7, -8}, PoolAttrs(3, 1, 1)),
              ElementsAre(-5, -5, -5, -5));
  EXPECT_THAT(MaxPoolGrad({-5, -6, -7, -8}, 2, 2, {1, 1, 1, 1}, PoolAttrs(3, 1, 1)),
              ElementsAre(4, 0, 0, 0));
}

TEST(MaxPoolTest, NanWinsAndTakesTheGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> y =
      RunOne(ops::MaxPool2dOp(), Shape{1, 1, 2, 2}, {1, nan, 2, 3}, PoolAttrs(2, 2, 0));
  ASSERT_EQ(y.size(), 1u);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_THAT(MaxPoolGrad({1, nan, 2, nan}, 2, 2, {5}, PoolAttrs(2, 2, 0)),
              ElementsAre(0, 5, 0, 0));
}

TEST(GlobalAvgPoolTest, AveragesEachChannel) {
  // NCHW [1, 2, 1, 2]: channel 0 = {1, 2}, channel 1 = {3, 5}. NHWC [1, 1, 2, 2]: the same
  // numbers interleave, channel 0 = {1, 3}, channel 1 = {2, 5}.
  EXPECT_THAT(RunOne(ops::GlobalAvgPoolOp(), Shape{1, 2, 1, 2}, {1, 2, 3, 5}, {}),
              ElementsAre(1.5, 4));
  EXPECT_THAT(RunOne(ops::GlobalAvgPoolOp(), Shape{1, 1, 2, 2}, {1, 2, 3, 5},
                     {{"layout", std::string("NHWC")}}),
              ElementsAre(2, 3.5));
}

// NHWC against NCHW transposed --------------------------------------------------------------

// An NCHW buffer of logical extents `nchw`, rewritten in NHWC order.
std::vector<double> ToNhwc(const std::vector<double>& v, const std::vector<int64_t>& nchw) {
  const int64_t n = nchw[0], c = nchw[1], h = nchw[2], w = nchw[3];
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t q = 0; q < w; ++q)
          out[((b * h + r) * w + q) * c + ch] = v[((b * c + ch) * h + r) * w + q];
  return out;
}

std::vector<double> RandomValues(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-2, 2);
  std::vector<double> v(count);
  for (double& e : v) e = uniform(rng);
  return v;
}

// Every image op and its gradient over x of logical extents [2, 3, 5, 4] in `layout`.
Graph ImageOps(Layout layout) {
  Graph g;
  const Attrs with_layout = {{"layout", std::string(LayoutName(layout))}};
  Value x = *g.AddInput("x", {ImageShape(layout, 2, 3, 5, 4)});
  Value dy = *g.AddInput("dy", {ImageShape(layout, 2, 3, 5, 4)});
  Value dy_pool = *g.AddInput("dy_pool", {ImageShape(layout, 2, 3, 3, 2)});
  Value dy_gap = *g.AddInput("dy_gap", {Shape{2, 3}});
  Value gamma = *g.AddParameter("gamma", {Shape{3}}, TestInit());
  Value beta = *g.AddParameter("beta", {Shape{3}}, TestInit());
  Value mean = *g.AddState("running_mean", {Shape{3}}, TestInit());
  Value var = *g.AddState("running_var", {Shape{3}}, Initializer::Uniform(0.5, 2));
  EXPECT_TRUE(
      g.AddOp(ops::BatchNormInferOp(), "bn_infer", {x, gamma, beta, mean, var}, with_layout).ok());
  auto bn = *g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var}, with_layout);
  EXPECT_TRUE(
      g.AddOp(ops::BatchNormGradOp(), "bn_grad", {dy, x, gamma, bn[1], bn[2]}, with_layout).ok());
  const Attrs pool = PoolAttrs(3, 2, 1, layout);
  Value y = *g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, pool);
  EXPECT_TRUE(g.AddOp1(ops::MaxPool2dGradOp(), "pool_grad", {dy_pool, x, y}, pool).ok());
  EXPECT_TRUE(g.AddOp1(ops::GlobalAvgPoolOp(), "gap", {x}, with_layout).ok());
  EXPECT_TRUE(g.AddOp1(ops::GlobalAvgPoolGradOp(), "gap_grad", {dy_gap},
                       {{"layout", std::string(LayoutName(layout))}, {"height", 5}, {"width", 4}})
                  .ok());
  return g;
}

TEST(ImageLayoutTest, NhwcEqualsNchwTransposed) {
  const std::vector<double> x = RandomValues(120, 1), dy = RandomValues(120, 2);
  const std::vector<double> dy_pool = RandomValues(36, 3), dy_gap = RandomValues(6, 4);
  Graph nchw = ImageOps(Layout::kNCHW), nhwc = ImageOps(Layout::kNHWC);
  ir::ReferenceExecutor a(nchw, /*float64=*/true, 5), b(nhwc, /*float64=*/true, 5);
  ASSERT_TRUE(a.SetLeaf("x", x).ok() && a.SetLeaf("dy", dy).ok());
  ASSERT_TRUE(a.SetLeaf("dy_pool", dy_pool).ok() && a.SetLeaf("dy_gap", dy_gap).ok());
  ASSERT_TRUE(b.SetLeaf("x", ToNhwc(x, {2, 3, 5, 4})).ok());
  ASSERT_TRUE(b.SetLeaf("dy", ToNhwc(dy, {2, 3, 5, 4})).ok());
  ASSERT_TRUE(b.SetLeaf("dy_pool", ToNhwc(dy_pool, {2, 3, 3, 2})).ok());
  ASSERT_TRUE(b.SetLeaf("dy_gap", dy_gap).ok());
  ASSERT_TRUE(a.Run().ok());
  ASSERT_TRUE(b.Run().ok());
  int compared = 0;
  for (const Node& n : nchw.nodes()) {
    const int32_t id = n.id;
    for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) {
      auto va = (*a.Tensor({id, o}))->data<double>();
      auto vb = (*b.Tensor({id, o}))->data<double>();
      std::vector<double> want(va.begin(), va.end());
      const Shape& s = n.outputs[o].shape;
      if (s.rank() == 4) want = ToNhwc(want, s.dims());
      ASSERT_EQ(want.size(), vb.size()) << n.name;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(want[i], vb[i], 1e-12 * std::max(1.0, std::abs(want[i])))
            << n.name << ":" << o << "[" << i << "]";
      }
      ++compared;
    }
  }
  // 8 leaves (running stats as updated) and 11 outputs of 7 ops.
  EXPECT_EQ(compared, 19);
}

// Errors -------------------------------------------------------------------------------------

absl::Status AddPool(const Shape& x_shape, const Attrs& attrs) {
  Graph g;
  Value x = *g.AddInput("x", {x_shape});
  return g.AddOp(ops::MaxPool2dOp(), "pool", {x}, attrs).status();
}

TEST(PoolingErrorsTest, MessagesNameTheShapes) {
  EXPECT_THAT(AddPool({1, 1, 2, 2}, PoolAttrs(3, 1, 0)).message(),
              HasSubstr("op 'max_pool2d' node 'pool': a 3x3 window with padding 0x0 leaves no "
                        "output for x f32[1, 1, 2, 2]"));
  EXPECT_THAT(AddPool({1, 1, 8, 8}, PoolAttrs(2, 1, 2)).message(),
              HasSubstr("padding must be at most half the kernel"));
  EXPECT_THAT(AddPool({1, 1, 8, 8}, PoolAttrs(3, 0, 1)).message(),
              HasSubstr("kernel and stride must be positive"));
  EXPECT_THAT(AddPool({1, 8, 8}, PoolAttrs(3, 2, 1)).message(),
              HasSubstr("x must have rank 4 (NCHW), got f32[1, 8, 8]"));
  Attrs bad_layout = PoolAttrs(3, 2, 1);
  bad_layout["layout"] = std::string("CHWN");
  EXPECT_THAT(AddPool({1, 1, 8, 8}, bad_layout).message(), HasSubstr("got \"CHWN\""));
  Attrs missing = PoolAttrs(3, 2, 1);
  missing.erase("stride_h");
  EXPECT_THAT(AddPool({1, 1, 8, 8}, missing).message(), HasSubstr("missing attribute 'stride_h'"));
  EXPECT_TRUE(AddPool({1, 1, 8, 8}, PoolAttrs(3, 2, 1)).ok());

  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 3, 8, 8}});
  Value flat = *g.AddInput("flat", {Shape{3, 4}});
  Value vec = *g.AddInput("vec", {Shape{12}});
  Value wrong = *g.AddInput("wrong", {Shape{2, 3, 3, 3}});
  EXPECT_THAT(g.AddOp(ops::MaxPool2dGradOp(), "pg", {wrong, x, wrong}, PoolAttrs(3, 2, 1))
                  .status()
                  .message(),
              HasSubstr("must both be f32[2, 3, 4, 4], the pooled x f32[2, 3, 8, 8]"));
  EXPECT_THAT(g.AddOp(ops::GlobalAvgPoolOp(), "gap", {flat}).status().message(),
              HasSubstr("x must have rank 4 (NCHW), got f32[3, 4]"));
  EXPECT_THAT(g.AddOp(ops::GlobalAvgPoolGradOp(), "gap_grad", {flat}, {{"height", 0}, {"width", 2}})
                  .status()
                  .message(),
              HasSubstr("height 0 and width 2 must be positive"));
  EXPECT_THAT(g.AddOp(ops::FlattenOp(), "fl", {vec}).status().message(),
              HasSubstr("x must have rank 2 or more to flatten, got f32[12]"));
  EXPECT_THAT(
      g.AddOp(ops::ReshapeOp(), "rs", {flat}, {{"shape", std::string("5,2")}}).status().message(),
      HasSubstr("cannot reshape x f32[3, 4] (12 elements) to [5, 2] (10 elements)"));
  EXPECT_THAT(
      g.AddOp(ops::ReshapeOp(), "rs2", {flat}, {{"shape", std::string("3,x")}}).status().message(),
      HasSubstr("must list non-negative integers"));
  auto flattened = g.AddOp1(ops::FlattenOp(), "fl2", {x});
  ASSERT_TRUE(flattened.ok());
  EXPECT_EQ(g.spec(*flattened).shape, (Shape{2, 192}));
}

TEST(PoolingErrorsTest, GpuLoweringIsFloat32OrBfloat16Only) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{1, 1, 8, 8}});
  Value y = *g.AddOp1(ops::MaxPool2dOp(), "pool1", {x}, PoolAttrs(3, 2, 1));
  ops::LoweringContext ctx;
  ctx.input_specs = {{Shape{1, 1, 8, 8}, DType::kFloat64}};
  auto lowered = ops::MaxPool2dOp().lower(ctx, g.node(y.node));
  EXPECT_EQ(lowered.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(lowered.status().message(), HasSubstr("node 'pool1': max_pool2d runs on the GPU"));
}

// The trainer warms the kernel store with each pooling node's sized kernels: channels-last with a
// multiple of 4 channels has them (at its shape and type), NCHW has none.
TEST(PoolingKernelsTest, SizedKernelsOfAPoolingNode) {
  for (Layout layout : {Layout::kNHWC, Layout::kNCHW}) {
    Graph g;
    const Shape shape = layout == Layout::kNHWC ? Shape{2, 12, 10, 8} : Shape{2, 8, 12, 10};
    const Value x = *g.AddParameter("x", {shape}, Initializer::Uniform(-1, 1));
    const Value y = *g.AddOp1(ops::MaxPool2dOp(), "pool", {x},
                              {{"kernel_h", int64_t{3}},
                               {"kernel_w", int64_t{3}},
                               {"stride_h", int64_t{2}},
                               {"stride_w", int64_t{2}},
                               {"pad_h", int64_t{1}},
                               {"pad_w", int64_t{1}},
                               {"layout", std::string(LayoutName(layout))}});
    const std::vector<codegen::GeneratedKernel> kernels =
        ops::SizedPoolingKernelsOf(g, g.node(y.node));
    if (layout == Layout::kNCHW) {
      EXPECT_TRUE(kernels.empty());
      continue;
    }
    ASSERT_EQ(kernels.size(), 5u);
    for (const codegen::GeneratedKernel& kernel : kernels) {
      EXPECT_NE(kernel.code.find("2LL, 8LL, 12LL, 10LL, 6LL, 5LL, 3, 3, 2, 2, 1, 1"),
                std::string::npos)
          << kernel.name;
    }
  }
  Graph g;
  const Value w = *g.AddParameter("w", {Shape{3, 4}}, Initializer::Uniform(-1, 1));
  const Value r = *g.AddOp1(ops::ReluOp(), "relu", {w});
  EXPECT_TRUE(ops::SizedPoolingKernelsOf(g, g.node(r.node)).empty());
}

TEST(PoolingKernelsTest, EveryKernelCompilesForSm90) {
  std::vector<codegen::GeneratedKernel> kernels = codegen::PoolingKernels();
  // And the channels-last ones with sizes compiled in: a ResNet stem's at batch 2.
  const codegen::PoolSizes stem{.n = 2,
                                .c = 64,
                                .h = 112,
                                .w = 112,
                                .oh = 56,
                                .ow = 56,
                                .kh = 3,
                                .kw = 3,
                                .sh = 2,
                                .sw = 2,
                                .ph = 1,
                                .pw = 1};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (codegen::GeneratedKernel& kernel : codegen::PoolingKernels(stem, dtype)) {
      EXPECT_NE(kernel.code.find("2LL, 64LL, 112LL"), std::string::npos) << kernel.name;
      kernels.push_back(std::move(kernel));
    }
  }
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
