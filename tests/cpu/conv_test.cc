// Convolution ops (src/ops/conv.h) on the CPU: shape rules and their messages, a hand-computed
// forward, NHWC against NCHW, gradients against float64 finite differences, and the pieces of the
// GPU path that need no GPU (NVRTC sources, the algorithm cache).
#include "src/ops/conv.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/conv_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/kernel_store.h"
#include "src/util/status_macros.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

MATCHER_P2(StatusIs, code, message, "") {
  return arg.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(arg.message()), result_listener);
}

Attrs ConvAttrs(int64_t stride, int64_t pad, int64_t dilation, int64_t groups,
                const std::string& layout) {
  return {{"stride_h", stride}, {"stride_w", stride},     {"pad_h", pad},
          {"pad_w", pad},       {"dilation_h", dilation}, {"dilation_w", dilation},
          {"groups", groups},   {"layout", layout}};
}

// A scalar loss for 4-D values, ½·mean(z²), so that each element's gradient is the element itself
// over the count (not a constant); and its gradient op, dz = dloss · z / count. A mean keeps the
// loss near 1, where central differences lose least to rounding. Test-only ops: the engine's
// losses take logits of rank 2.
absl::StatusOr<std::vector<TensorSpec>> InferHalfMeanSquare(const Attrs&,
                                                            absl::Span<const TensorSpec> in) {
  return std::vector<TensorSpec>{{Shape{}, in[0].dtype}};
}
absl::Status CpuHalfMeanSquare(const Node&, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  return ops::DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    double sum = 0;
    for (T v : in[0]->data<T>()) sum += 0.5 * static_cast<double>(v) * static_cast<double>(v);
    out[0]->data<T>()[0] = static_cast<T>(sum / static_cast<double>(in[0]->size()));
    return absl::OkStatus();
  });
}
absl::StatusOr<std::vector<TensorSpec>> InferScaleByOverCount(const Attrs&,
                                                              absl::Span<const TensorSpec> in) {
  return std::vector<TensorSpec>{in[0]};
}
absl::Status CpuScaleByOverCount(const Node&, absl::Span<ir::HostTensor* const> in,
                                 absl::Span<ir::HostTensor* const> out) {
  return ops::DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto z = in[0]->data<T>();
    const T scale = in[1]->data<T>()[0] / static_cast<T>(z.size());
    for (size_t i = 0; i < z.size(); ++i) out[0]->data<T>()[i] = z[i] * scale;
    return absl::OkStatus();
  });
}
const ir::OpDef& ScaleByOverCountOp() {
  static const ir::OpDef op{.name = "test_scale_by_over_count",
                            .infer = InferScaleByOverCount,
                            .cpu = CpuScaleByOverCount};
  return op;
}
absl::StatusOr<std::vector<Value>> GradHalfMeanSquare(Graph& g, const Node& node,
                                                      absl::Span<const Value> dout,
                                                      const std::vector<bool>&) {
  ASSIGN_OR_RETURN(Value dz, g.AddOp1(ScaleByOverCountOp(), absl::StrCat(node.name, ".grad"),
                                      {node.inputs[0], dout[0]}));
  return std::vector<Value>{dz};
}
const ir::OpDef& HalfMeanSquareOp() {
  static const ir::OpDef op{.name = "test_half_mean_square",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferHalfMeanSquare,
                            .grad = GradHalfMeanSquare,
                            .cpu = CpuHalfMeanSquare};
  return op;
}

// Shape rules -----------------------------------------------------------------------------------

absl::StatusOr<TensorSpec> ConvOutput(const TensorSpec& x, const TensorSpec& w, Attrs attrs) {
  Graph g;
  ASSIGN_OR_RETURN(Value xv, g.AddInput("x", x));
  ASSIGN_OR_RETURN(Value wv, g.AddParameter("w", w, TestInit()));
  ASSIGN_OR_RETURN(Value y, g.AddOp1(ops::Conv2dOp(), "conv", {xv, wv}, std::move(attrs)));
  return g.spec(y);
}

TEST(ConvShapeTest, ResNetStemAndDownsampleShapesInBothLayouts) {
  auto stem =
      ConvOutput({Shape{2, 3, 224, 224}}, {Shape{64, 3, 7, 7}}, ConvAttrs(2, 3, 1, 1, "NCHW"));
  ASSERT_TRUE(stem.ok()) << stem.status();
  EXPECT_EQ(stem->shape, (Shape{2, 64, 112, 112}));
  auto stem_nhwc =
      ConvOutput({Shape{2, 224, 224, 3}}, {Shape{64, 7, 7, 3}}, ConvAttrs(2, 3, 1, 1, "NHWC"));
  ASSERT_TRUE(stem_nhwc.ok()) << stem_nhwc.status();
  EXPECT_EQ(stem_nhwc->shape, (Shape{2, 112, 112, 64}));
  auto down = ConvOutput({Shape{2, 64, 56, 56}}, {Shape{128, 64, 1, 1}},
                         {{"stride_h", int64_t{2}}, {"stride_w", int64_t{2}}});
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->shape, (Shape{2, 128, 28, 28}));
}

TEST(ConvShapeTest, MissingAttributesTakeDefaults) {
  auto y = ConvOutput({Shape{1, 4, 6, 5}}, {Shape{8, 4, 3, 2}}, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape, (Shape{1, 8, 4, 4}));
}

TEST(ConvShapeTest, ChannelMismatchNamesTheShapes) {
  EXPECT_THAT(ConvOutput({Shape{2, 4, 5, 5}}, {Shape{4, 3, 3, 3}}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("channels mismatch"), HasSubstr("f32[2, 4, 5, 5]"),
                             HasSubstr("f32[4, 3, 3, 3]"))));
}

TEST(ConvShapeTest, KernelLargerThanPaddedInputLeavesZeroOutputSize) {
  EXPECT_THAT(ConvOutput({Shape{1, 3, 5, 5}}, {Shape{2, 3, 7, 7}}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zero output size"), HasSubstr("f32[1, 3, 5, 5]"))));
  // Dilation 3 makes a 3x3 kernel span 7 rows.
  EXPECT_THAT(
      ConvOutput({Shape{1, 3, 5, 5}}, {Shape{2, 3, 3, 3}}, ConvAttrs(1, 0, 3, 1, "NCHW")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero output size")));
}

TEST(ConvShapeTest, GroupsMustDivideBothChannelCounts) {
  EXPECT_THAT(
      ConvOutput({Shape{1, 4, 5, 5}}, {Shape{6, 2, 3, 3}}, ConvAttrs(1, 1, 1, 3, "NCHW")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("C = 4"), HasSubstr("not divisible by groups = 3"))));
  EXPECT_THAT(
      ConvOutput({Shape{1, 4, 5, 5}}, {Shape{5, 2, 3, 3}}, ConvAttrs(1, 1, 1, 2, "NCHW")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("K = 5"), HasSubstr("not divisible by groups = 2"))));
}

TEST(ConvShapeTest, RejectsBadRankDtypeAndLayout) {
  EXPECT_THAT(ConvOutput({Shape{4, 5, 5}}, {Shape{4, 4, 3, 3}}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("rank 4"), HasSubstr("f32[4, 5, 5]"))));
  EXPECT_THAT(ConvOutput({Shape{1, 4, 5, 5}, DType::kInt32}, {Shape{4, 4, 3, 3}}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("float"), HasSubstr("i32[1, 4, 5, 5]"))));
  EXPECT_THAT(
      ConvOutput({Shape{1, 4, 5, 5}}, {Shape{4, 4, 3, 3}}, {{"layout", std::string("NCWH")}})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("layout"), HasSubstr("\"NCWH\""))));
}

TEST(ConvShapeTest, DgradTakesTheInputSizeThatStrideHides) {
  // With stride 2, inputs of 5 and 6 rows both give 3 output rows; input_h says which.
  Graph g;
  Value dy = *g.AddInput("dy", {Shape{2, 8, 3, 3}});
  Value w = *g.AddParameter("w", {Shape{8, 4, 3, 3}}, TestInit());
  for (int64_t size : {5, 6}) {
    Attrs attrs = ConvAttrs(2, 1, 1, 1, "NCHW");
    attrs["input_h"] = size;
    attrs["input_w"] = size;
    auto dx = g.AddOp1(ops::Conv2dDgradOp(), "", {dy, w}, attrs);
    ASSERT_TRUE(dx.ok()) << dx.status();
    EXPECT_EQ(g.spec(*dx).shape, (Shape{2, 4, size, size}));
  }
  Attrs wrong = ConvAttrs(2, 1, 1, 1, "NCHW");
  wrong["input_h"] = int64_t{9};
  wrong["input_w"] = int64_t{5};
  EXPECT_THAT(g.AddOp1(ops::Conv2dDgradOp(), "", {dy, w}, wrong).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dy is 3x3")));
}

TEST(ConvShapeTest, WgradGivesTheFilterShapeOfEachLayout) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 5, 5, 4}});
  Value dy = *g.AddInput("dy", {Shape{2, 3, 3, 6}});
  Attrs attrs = ConvAttrs(2, 1, 1, 2, "NHWC");
  attrs["kernel_h"] = int64_t{3};
  attrs["kernel_w"] = int64_t{3};
  auto dw = g.AddOp1(ops::Conv2dWgradOp(), "", {x, dy}, attrs);
  ASSERT_TRUE(dw.ok()) << dw.status();
  EXPECT_EQ(g.spec(*dw).shape, (Shape{6, 3, 3, 2}));
}

TEST(ConvShapeTest, ChannelBiasMustMatchTheChannelsOfTheLayout) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 3, 4, 5}});
  Value b5 = *g.AddParameter("b5", {Shape{5}}, TestInit());
  Value b3 = *g.AddParameter("b3", {Shape{3}}, TestInit());
  EXPECT_TRUE(g.AddOp1(ops::ChannelBiasAddOp(), "", {x, b3}).ok());
  EXPECT_TRUE(
      g.AddOp1(ops::ChannelBiasAddOp(), "", {x, b5}, {{"layout", std::string("NHWC")}}).ok());
  EXPECT_THAT(g.AddOp1(ops::ChannelBiasAddOp(), "", {x, b5}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("f32[5]"), HasSubstr("f32[2, 3, 4, 5]"))));
  auto db = g.AddOp1(ops::ChannelSumOp(), "", {x}, {{"layout", std::string("NHWC")}});
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(g.spec(*db).shape, (Shape{5}));
}

// Reference values ------------------------------------------------------------------------------

// Runs a graph of one conv2d on the CPU with the given x and w; returns y.
std::vector<double> RunConv(const Shape& x_shape, const std::vector<double>& x,
                            const Shape& w_shape, const std::vector<double>& w, Attrs attrs) {
  Graph g;
  Value xv = *g.AddInput("x", {x_shape});
  Value wv = *g.AddParameter("w", {w_shape}, TestInit());
  auto y = g.AddOp1(ops::Conv2dOp(), "conv", {xv, wv}, std::move(attrs));
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return {};
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 1);
  EXPECT_TRUE(cpu.SetLeaf("x", x).ok());
  EXPECT_TRUE(cpu.SetLeaf("w", w).ok());
  EXPECT_TRUE(cpu.Run().ok());
  auto out = (*cpu.Tensor(*y))->data<float>();
  return std::vector<double>(out.begin(), out.end());
}

TEST(ConvReferenceTest, HandComputedSmallCases) {
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 3x3
  const std::vector<double> w = {1, 2, 3, 4};                 // 2x2
  // y[p, q] = x[p, q] + 2 x[p, q+1] + 3 x[p+1, q] + 4 x[p+1, q+1].
  EXPECT_EQ(RunConv({1, 1, 3, 3}, x, {1, 1, 2, 2}, w, {}), (std::vector<double>{37, 47, 67, 77}));
  // Pad 1, stride 2: windows at rows/columns -1 and 1; taps in the padding read zero.
  EXPECT_EQ(RunConv({1, 1, 3, 3}, x, {1, 1, 2, 2}, w, ConvAttrs(2, 1, 1, 1, "NCHW")),
            (std::vector<double>{4, 18, 36, 77}));
  // Dilation 2 on a 3x3 input: one output, the four corners.
  EXPECT_EQ(RunConv({1, 1, 3, 3}, x, {1, 1, 2, 2}, w, ConvAttrs(1, 0, 2, 1, "NCHW")),
            (std::vector<double>{1 * 1 + 2 * 3 + 3 * 7 + 4 * 9}));
  // Two groups of one channel each: no mixing across groups.
  EXPECT_EQ(RunConv({1, 2, 1, 1}, {2, 3}, {2, 1, 1, 1}, {5, 7}, ConvAttrs(1, 0, 1, 2, "NCHW")),
            (std::vector<double>{10, 21}));
}

// x in NCHW order as NHWC, or NHWC as NCHW: element (a, b, c, d) of a [A, B, C, D] tensor moves to
// (a, c, d, b) of [A, C, D, B].
std::vector<double> ChannelsLast(const std::vector<double>& v, const Shape& s) {
  std::vector<double> out(v.size());
  const int64_t A = s.dim(0), B = s.dim(1), C = s.dim(2), D = s.dim(3);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d)
          out[((a * C + c) * D + d) * B + b] = v[((a * B + b) * C + c) * D + d];
  return out;
}
Shape ChannelsLast(const Shape& s) { return Shape{s.dim(0), s.dim(2), s.dim(3), s.dim(1)}; }

std::vector<double> Random(int64_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    v[i] = static_cast<double>(seed >> 11) / static_cast<double>(1ULL << 53) * 2 - 1;
  }
  return v;
}

// Every op in NHWC equals the op in NCHW with inputs and outputs transposed.
TEST(ConvReferenceTest, NhwcEqualsNchwTransposed) {
  const Shape x_shape{2, 4, 7, 6}, w_shape{6, 2, 3, 2}, dy_shape{2, 6, 4, 3};
  const std::vector<double> x = Random(x_shape.NumElements(), 1);
  const std::vector<double> w = Random(w_shape.NumElements(), 2);
  const std::vector<double> dy = Random(dy_shape.NumElements(), 3);
  const std::vector<double> bias = Random(4, 4);
  std::vector<std::vector<double>> results[2];
  for (const bool nhwc : {false, true}) {
    const std::string layout = nhwc ? "NHWC" : "NCHW";
    const auto shape = [&](const Shape& s) { return nhwc ? ChannelsLast(s) : s; };
    const auto data = [&](const std::vector<double>& v, const Shape& s) {
      return nhwc ? ChannelsLast(v, s) : v;
    };
    Graph g;
    Value xv = *g.AddInput("x", {shape(x_shape)});
    Value wv = *g.AddInput("w", {shape(w_shape)});
    Value dyv = *g.AddInput("dy", {shape(dy_shape)});
    Value bv = *g.AddInput("b", {Shape{4}});
    Attrs attrs = ConvAttrs(2, 1, 1, 2, layout);
    attrs["input_h"] = int64_t{7};
    attrs["input_w"] = int64_t{6};
    attrs["kernel_h"] = int64_t{3};
    attrs["kernel_w"] = int64_t{2};
    attrs["dilation_w"] = int64_t{2};
    std::vector<Value> outs;
    for (const ir::OpDef* op : {&ops::Conv2dOp(), &ops::Conv2dDgradOp(), &ops::Conv2dWgradOp()}) {
      std::vector<Value> in = op == &ops::Conv2dOp()        ? std::vector<Value>{xv, wv}
                              : op == &ops::Conv2dDgradOp() ? std::vector<Value>{dyv, wv}
                                                            : std::vector<Value>{xv, dyv};
      auto out = g.AddOp1(*op, "", in, attrs);
      ASSERT_TRUE(out.ok()) << out.status();
      outs.push_back(*out);
    }
    ASSERT_EQ(g.spec(outs[0]).shape, shape(dy_shape));
    outs.push_back(*g.AddOp1(ops::ChannelBiasAddOp(), "", {xv, bv}, {{"layout", layout}}));
    outs.push_back(*g.AddOp1(ops::ChannelSumOp(), "", {dyv}, {{"layout", layout}}));
    ir::ReferenceExecutor cpu(g, /*float64=*/true, 1);
    ASSERT_TRUE(cpu.SetLeaf("x", data(x, x_shape)).ok());
    ASSERT_TRUE(cpu.SetLeaf("w", data(w, w_shape)).ok());
    ASSERT_TRUE(cpu.SetLeaf("dy", data(dy, dy_shape)).ok());
    ASSERT_TRUE(cpu.SetLeaf("b", bias).ok());
    ASSERT_TRUE(cpu.Run().ok());
    for (Value v : outs) {
      auto t = (*cpu.Tensor(v))->data<double>();
      results[nhwc].emplace_back(t.begin(), t.end());
    }
  }
  const Shape nchw_shapes[] = {dy_shape, x_shape, w_shape, x_shape};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ChannelsLast(results[0][i], nchw_shapes[i]), results[1][i]) << "output " << i;
  }
  EXPECT_EQ(results[0][4], results[1][4]) << "channel_sum";
}

// Convolutions past kTapsPerThread run on several threads, split by image (forward, data
// gradient) or by output channel (weight gradient): each image's or channel's slice has the bits
// that the same convolution of that slice alone (small: one thread) gives.
TEST(ConvReferenceTest, LargeConvolutionsOnThreadsGiveTheBitsOfTheirSlices) {
  constexpr int64_t kN = 8, kC = 32, kK = 32, kHW = 16;
  const Shape x_shape{kN, kC, kHW, kHW}, w_shape{kK, kC, 3, 3}, y_shape{kN, kK, kHW, kHW};
  const std::vector<double> x = Random(x_shape.NumElements(), 5);
  const std::vector<double> w = Random(w_shape.NumElements(), 6);
  const std::vector<double> dy = Random(y_shape.NumElements(), 7);
  Attrs attrs = ConvAttrs(1, 1, 1, 1, "NCHW");
  attrs["input_h"] = attrs["input_w"] = kHW;
  attrs["kernel_h"] = attrs["kernel_w"] = int64_t{3};
  Graph g;
  Value xv = *g.AddInput("x", {x_shape}), wv = *g.AddInput("w", {w_shape});
  Value dyv = *g.AddInput("dy", {y_shape});
  const Value y = *g.AddOp1(ops::Conv2dOp(), "y", {xv, wv}, attrs);
  const Value dx = *g.AddOp1(ops::Conv2dDgradOp(), "dx", {dyv, wv}, attrs);
  const Value dw = *g.AddOp1(ops::Conv2dWgradOp(), "dw", {xv, dyv}, attrs);
  std::vector<Value> image_y, image_dx, channel_dw;
  for (int64_t i = 0; i < kN; ++i) {
    Value xi = *g.AddInput(absl::StrCat("x", i), {Shape{1, kC, kHW, kHW}});
    Value dyi = *g.AddInput(absl::StrCat("dy", i), {Shape{1, kK, kHW, kHW}});
    image_y.push_back(*g.AddOp1(ops::Conv2dOp(), "", {xi, wv}, attrs));
    image_dx.push_back(*g.AddOp1(ops::Conv2dDgradOp(), "", {dyi, wv}, attrs));
  }
  for (int64_t k = 0; k < kK; ++k) {
    Value dyk = *g.AddInput(absl::StrCat("dy_channel", k), {Shape{kN, 1, kHW, kHW}});
    channel_dw.push_back(*g.AddOp1(ops::Conv2dWgradOp(), "", {xv, dyk}, attrs));
  }
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 1);
  ASSERT_TRUE((cpu.SetLeaf("x", x)).ok());
  ASSERT_TRUE((cpu.SetLeaf("w", w)).ok());
  ASSERT_TRUE((cpu.SetLeaf("dy", dy)).ok());
  const int64_t plane = kHW * kHW;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE((cpu.SetLeaf(absl::StrCat("x", i),
                             absl::MakeConstSpan(x).subspan(i * kC * plane, kC * plane)))
                    .ok());
    ASSERT_TRUE((cpu.SetLeaf(absl::StrCat("dy", i),
                             absl::MakeConstSpan(dy).subspan(i * kK * plane, kK * plane)))
                    .ok());
  }
  for (int64_t k = 0; k < kK; ++k) {
    std::vector<double> channel;
    for (int64_t n = 0; n < kN; ++n) {
      const auto first = dy.begin() + (n * kK + k) * plane;
      channel.insert(channel.end(), first, first + plane);
    }
    ASSERT_TRUE((cpu.SetLeaf(absl::StrCat("dy_channel", k), channel)).ok());
  }
  ASSERT_TRUE((cpu.Run()).ok());
  auto slice = [&](Value v, int64_t first, int64_t count) {
    auto t = (*cpu.Tensor(v))->data<float>().subspan(first, count);
    return std::vector<float>(t.begin(), t.end());
  };
  auto all = [&](Value v) { return slice(v, 0, g.spec(v).shape.NumElements()); };
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_EQ(slice(y, i * kK * plane, kK * plane), all(image_y[i])) << "forward, image " << i;
    EXPECT_EQ(slice(dx, i * kC * plane, kC * plane), all(image_dx[i])) << "dgrad, image " << i;
  }
  for (int64_t k = 0; k < kK; ++k) {
    EXPECT_EQ(slice(dw, k * kC * 9, kC * 9), all(channel_dw[k])) << "wgrad, channel " << k;
  }
}

// Gradients -------------------------------------------------------------------------------------

struct GradientCase {
  std::string name;
  std::string layout;
  int64_t stride, pad, dilation, groups;
};

void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

class ConvGradientTest : public ::testing::TestWithParam<GradientCase> {};

// conv2d then channel_bias_add then ½·mean(z²): checks dgrad (x is a parameter), wgrad and
// channel_sum against finite differences.
TEST_P(ConvGradientTest, MatchesFiniteDifferences) {
  const GradientCase& c = GetParam();
  const int64_t n = 2, channels = 4, size = 5, k = 4, r = 3;
  const bool nhwc = c.layout == "NHWC";
  Graph g;
  Value x = *g.AddParameter(
      "x", {nhwc ? Shape{n, size, size, channels} : Shape{n, channels, size, size}}, TestInit());
  const int64_t cg = channels / c.groups;
  Value w = *g.AddParameter("w", {nhwc ? Shape{k, r, r, cg} : Shape{k, cg, r, r}}, TestInit());
  Value b = *g.AddParameter("b", {Shape{k}}, TestInit());
  auto y = g.AddOp1(ops::Conv2dOp(), "conv", {x, w},
                    ConvAttrs(c.stride, c.pad, c.dilation, c.groups, c.layout));
  ASSERT_TRUE(y.ok()) << y.status();
  auto z = g.AddOp1(ops::ChannelBiasAddOp(), "bias", {*y, b}, {{"layout", c.layout}});
  ASSERT_TRUE(z.ok()) << z.status();
  auto loss = g.AddOp1(HalfMeanSquareOp(), "loss", {*z});
  ASSERT_TRUE(loss.ok()) << loss.status();
  ExpectGradientsMatchFiniteDifferences(g, *loss, {}, 7);
}

INSTANTIATE_TEST_SUITE_P(AllAttributes, ConvGradientTest,
                         ::testing::Values(GradientCase{"Plain", "NCHW", 1, 0, 1, 1},
                                           GradientCase{"Padded", "NCHW", 1, 1, 1, 1},
                                           GradientCase{"Groups2", "NCHW", 1, 1, 1, 2},
                                           GradientCase{"Depthwise", "NCHW", 1, 1, 1, 4},
                                           GradientCase{"Stride2", "NCHW", 2, 1, 1, 1},
                                           GradientCase{"Dilation2", "NCHW", 1, 2, 2, 1},
                                           GradientCase{"NhwcPadded", "NHWC", 1, 1, 1, 1},
                                           GradientCase{"NhwcGroups2Stride2", "NHWC", 2, 1, 1, 2},
                                           GradientCase{"NhwcDilation2", "NHWC", 1, 1, 2, 1}),
                         [](const ::testing::TestParamInfo<GradientCase>& info) {
                           return info.param.name;
                         });

TEST(ConvGradientRuleTest, EmitsDgradAndWgradWithRolesAndExtents) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{2, 4, 7, 7}}, TestInit());
  Value w = *g.AddParameter("w", {Shape{4, 4, 3, 3}}, TestInit());
  Value y = *g.AddOp1(ops::Conv2dOp(), "conv", {x, w}, ConvAttrs(2, 1, 1, 1, "NCHW"));
  Value loss = *g.AddOp1(HalfMeanSquareOp(), "loss", {y});
  auto training = autodiff::BuildBackward(g, loss);
  ASSERT_TRUE(training.ok()) << training.status();
  const Graph& t = training->graph;
  const Node& dgrad = t.node(*t.FindNode("conv.dgrad"));
  EXPECT_EQ(dgrad.op, &ops::Conv2dDgradOp());
  EXPECT_EQ(std::get<std::string>(dgrad.attrs.at("role")), "dgrad");
  EXPECT_EQ(std::get<int64_t>(dgrad.attrs.at("input_h")), 7);
  EXPECT_EQ(dgrad.outputs[0].shape, (Shape{2, 4, 7, 7}));
  const Node& wgrad = t.node(*t.FindNode("conv.wgrad"));
  EXPECT_EQ(wgrad.op, &ops::Conv2dWgradOp());
  EXPECT_EQ(std::get<std::string>(wgrad.attrs.at("role")), "wgrad");
  EXPECT_EQ(std::get<int64_t>(wgrad.attrs.at("kernel_w")), 3);
  EXPECT_EQ(wgrad.outputs[0].shape, (Shape{4, 4, 3, 3}));
}

TEST(ConvGradientRuleTest, ConstantInputGetsNoDgrad) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{1, 2, 4, 4}});
  Value w = *g.AddParameter("w", {Shape{2, 2, 3, 3}}, TestInit());
  Value y = *g.AddOp1(ops::Conv2dOp(), "conv", {x, w});
  auto training = autodiff::BuildBackward(g, *g.AddOp1(HalfMeanSquareOp(), "loss", {y}));
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_FALSE(training->graph.FindNode("conv.dgrad").ok());
  EXPECT_TRUE(training->graph.FindNode("conv.wgrad").ok());
}

// GPU pieces that need no GPU -------------------------------------------------------------------

TEST(ConvKernelSourcesTest, ChannelKernelsCompileForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::ConvKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
  }
}

// Lowering checks the dtype (of the context's specs, float64 here as a promoted graph would have
// them) before it touches the device, so this needs no GPU.
TEST(ConvLoweringTest, Float64IsUnimplementedAndNamesTheNode) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{1, 2, 4, 4}}, TestInit());
  Value w = *g.AddParameter("w", {Shape{2, 2, 3, 3}}, TestInit());
  Value y = *g.AddOp1(ops::Conv2dOp(), "conv64", {x, w});
  Value s = *g.AddOp1(ops::ChannelSumOp(), "sum64", {y});
  for (Value v : {y, s}) {
    const Node& node = g.node(v.node);
    ops::LoweringContext ctx;
    for (Value in : node.inputs) ctx.input_specs.push_back({g.spec(in).shape, DType::kFloat64});
    ctx.inputs.assign(node.inputs.size(), nullptr);
    ctx.outputs = {nullptr};
    auto kernel = node.op->lower(ctx, node);
    EXPECT_THAT(kernel.status(), StatusIs(absl::StatusCode::kUnimplemented,
                                          AllOf(HasSubstr(node.name), HasSubstr("float32"))));
  }
}

TEST(ConvAlgorithmCacheTest, KeepsOneChoicePerKeyAndSeparatesEveryOption) {
  runtime::ConvAlgorithmCache cache;
  runtime::ConvAlgorithmKey key;
  key.shape = {.n = 2,
               .c = 4,
               .h = 5,
               .w = 5,
               .k = 4,
               .r = 3,
               .s = 3,
               .p = 5,
               .q = 5,
               .pad_h = 1,
               .pad_w = 1};
  key.workspace_limit = 1 << 20;
  EXPECT_FALSE(cache.Find(key).has_value());
  EXPECT_EQ(cache.Insert(key, {.algo = 1, .math = CUDNN_FMA_MATH, .workspace_bytes = 64}).algo, 1);
  // A racing second search does not replace the first choice.
  EXPECT_EQ(cache.Insert(key, {.algo = 2, .math = CUDNN_FMA_MATH, .workspace_bytes = 0}).algo, 1);
  ASSERT_TRUE(cache.Find(key).has_value());
  EXPECT_EQ(cache.Find(key)->workspace_bytes, 64u);
  std::vector<runtime::ConvAlgorithmKey> variants(7, key);
  variants[0].kind = runtime::ConvKind::kBackwardFilter;
  variants[1].allow_tf32 = true;
  variants[2].deterministic = true;
  variants[3].measured = true;
  variants[4].workspace_limit = 0;
  variants[5].shape.layout = Layout::kNHWC;
  variants[6].shape.groups = 2;
  for (const runtime::ConvAlgorithmKey& variant : variants) {
    EXPECT_FALSE(cache.Find(variant).has_value()) << variant.shape.ToString();
  }
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace reprise
