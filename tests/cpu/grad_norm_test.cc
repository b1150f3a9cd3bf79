// grad_sum_squares and clip_coefficient: the two-stage global norm against a float64 sum, the
// chunking that fixes its order, the coefficient's clamp, NaN propagation and shape errors.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct NormGraph {
  Graph g;
  Value partials, norm, coef;
};

NormGraph MakeNormGraph(const std::vector<Shape>& shapes, double max_norm) {
  NormGraph n;
  std::vector<Value> grads;
  for (size_t i = 0; i < shapes.size(); ++i) {
    grads.push_back(
        *n.g.AddConstant("g" + std::to_string(i), {shapes[i]}, Initializer::Uniform(-1, 1)));
  }
  n.partials = *n.g.AddOp1(ops::GradSumSquaresOp(), "partials", grads);
  Value max = *n.g.AddInput("max_norm", {Shape{}}, Initializer::Constant(max_norm));
  auto out = *n.g.AddOp(ops::ClipCoefficientOp(), "clip", {n.partials, max});
  n.norm = out[0];
  n.coef = out[1];
  return n;
}

double Float(ir::ReferenceExecutor& cpu, Value v) { return (*cpu.Tensor(v))->data<float>()[0]; }

TEST(GradNormTest, PartialsAreOnePerChunkOfEachGradient) {
  NormGraph n = MakeNormGraph({Shape{5000}, Shape{3}, Shape{64, 64}, Shape{1}}, 1.0);
  // 5000 elements: two chunks of 4096; 3: one; 4096: one; 1: one.
  EXPECT_EQ(n.g.spec(n.partials).shape, (Shape{5}));
}

TEST(GradNormTest, NormMatchesAFloat64SumAndTheCoefficientClampsAtOne) {
  for (double max_norm : {0.5, 1e4}) {
    NormGraph n = MakeNormGraph({Shape{5000}, Shape{37}, Shape{10, 10}}, max_norm);
    ir::ReferenceExecutor cpu(n.g, /*float64=*/false, 9);
    ASSERT_TRUE(cpu.Run().ok());
    double sum = 0;
    for (const char* name : {"g0", "g1", "g2"}) {
      auto x = (*cpu.Leaf(name))->data<float>();
      for (float v : x) sum += static_cast<double>(v) * v;
    }
    const double norm = std::sqrt(sum);
    EXPECT_NEAR(Float(cpu, n.norm), norm, 1e-6 * norm);
    EXPECT_NEAR(Float(cpu, n.coef), std::min(1.0, max_norm / (norm + 1e-6)), 1e-7);
  }
}

// A block's threads summing the squares of `per_load` consecutive elements at a time, loads j,
// j + 256, ... in thread j, in order; then the tree.
float LaneSum(const std::vector<float>& x, int64_t n, int per_load) {
  std::vector<float> lanes(codegen::kNormBlock, 0.0f);
  for (int64_t i = 0; i < n; ++i) lanes[(i / per_load) % codegen::kNormBlock] += x[i] * x[i];
  for (int s = codegen::kNormBlock / 2; s > 0; s /= 2) {
    for (int j = 0; j < s; ++j) lanes[j] += lanes[j + s];
  }
  return lanes[0];
}

TEST(GradNormTest, ChunkSumFollowsTheKernelsOrder) {
  // Magnitudes over 24 binades, so that the order of the additions shows in the bits.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-3, 3);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> x(codegen::kNormChunk);
  for (float& v : x) v = std::ldexp(uniform(rng), exponent(rng));
  // Thread j sums quads j, j + 256, ... (16-byte loads), each quad's elements in order.
  for (int64_t n : {int64_t{codegen::kNormChunk}, int64_t{4095}, int64_t{1030}, int64_t{6}}) {
    EXPECT_EQ(codegen::ChunkSumSquares(x.data(), n), LaneSum(x, n, 4)) << n;
  }
  // The order matters for this input: element-strided lanes give other bits.
  EXPECT_NE(codegen::ChunkSumSquares(x.data(), codegen::kNormChunk),
            LaneSum(x, codegen::kNormChunk, 1));
  EXPECT_EQ(codegen::ChunkSumSquares(x.data(), 1), x[0] * x[0]);
  EXPECT_EQ(codegen::ChunkSumSquares(x.data(), 3, 0.5f), (x[0] * 0.5f) * (x[0] * 0.5f) +
                                                             (x[1] * 0.5f) * (x[1] * 0.5f) +
                                                             (x[2] * 0.5f) * (x[2] * 0.5f));
}

TEST(GradNormTest, NanGradientGivesANanCoefficient) {
  NormGraph n = MakeNormGraph({Shape{10}}, 1.0);
  ir::ReferenceExecutor cpu(n.g, false, 1);
  std::vector<double> values(10, 1.0);
  values[3] = NAN;
  ASSERT_TRUE(cpu.SetLeaf("g0", values).ok());
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_TRUE(std::isnan(Float(cpu, n.coef)));
}

TEST(GradNormTest, ShapeErrors) {
  Graph g;
  EXPECT_THAT(g.AddOp1(ops::GradSumSquaresOp(), "none", {}).status().message(),
              HasSubstr("at least one gradient"));
  Value ints = *g.AddConstant("ints", {Shape{4}, DType::kInt32}, Initializer::Zeros());
  EXPECT_EQ(g.AddOp1(ops::GradSumSquaresOp(), "ints_norm", {ints}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Value partials = *g.AddConstant("p", {Shape{4}}, Initializer::Zeros());
  Value vector_max = *g.AddConstant("max", {Shape{2}}, Initializer::Zeros());
  EXPECT_THAT(g.AddOp(ops::ClipCoefficientOp(), "clip", {partials, vector_max}).status().message(),
              HasSubstr("max_norm must be an f32 scalar"));
}

}  // namespace
}  // namespace reprise
