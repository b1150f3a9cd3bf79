// transpose on the CPU reference: shapes and attribute errors, values, gradients against float64
// finite differences, the GPU launch plan (emulated on the host) against the reference for every
// permutation, and the NVRTC kernels compiling.
#include "src/ops/transpose.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

Attrs Perm(absl::string_view perm) { return {{"perm", std::string(perm)}}; }

// Every permutation of 0..3, in lexicographic order.
std::vector<ops::Permutation> AllPermutations() {
  ops::Permutation p{0, 1, 2, 3};
  std::vector<ops::Permutation> all;
  do all.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  return all;
}

TEST(TransposeTest, ShapesFollowThePermutation) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 3, 4, 5}});
  auto nhwc = g.AddOp1(ops::TransposeOp(), "to_nhwc", {x}, Perm(ops::kNchwToNhwc));
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  EXPECT_EQ(g.spec(*nhwc).shape, (Shape{2, 4, 5, 3}));
  auto back = g.AddOp1(ops::TransposeOp(), "to_nchw", {*nhwc}, Perm(ops::kNhwcToNchw));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(g.spec(*back), g.spec(x));
  Value ints = *g.AddInput("ints", {Shape{1, 2, 3, 4}, DType::kInt32});
  auto moved = g.AddOp1(ops::TransposeOp(), "ints_t", {ints}, Perm("3,2,1,0"));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(g.spec(*moved), (TensorSpec{Shape{4, 3, 2, 1}, DType::kInt32}));
}

TEST(TransposeTest, BadPermutationsAndRanksAreClearErrors) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 3, 4, 5}});
  for (const char* bad : {"0,1,2", "0,1,2,2", "0,1,2,4", "a,b,c,d", "0,1,2,3,4", ""}) {
    auto y = g.AddOp1(ops::TransposeOp(), "", {x}, Perm(bad));
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(y.status().message(), HasSubstr("perm")) << bad;
  }
  auto missing = g.AddOp1(ops::TransposeOp(), "no_perm", {x});
  EXPECT_THAT(missing.status().message(), HasSubstr("'perm'"));
  Value flat = *g.AddInput("flat", {Shape{6, 20}});
  auto rank = g.AddOp1(ops::TransposeOp(), "rank2", {flat}, Perm("0,2,3,1"));
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.status().message(), HasSubstr("rank 4"));
}

TEST(TransposeTest, PermutationHelpers) {
  EXPECT_EQ(ops::InversePermutation({0, 2, 3, 1}), (ops::Permutation{0, 3, 1, 2}));
  EXPECT_EQ(ops::PermutationString(ops::InversePermutation({0, 2, 3, 1})), ops::kNhwcToNchw);
  for (const ops::Permutation& p : AllPermutations()) {
    const ops::Permutation q = ops::InversePermutation(p);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(p[q[i]], i);
  }
}

// y[n, h, w, c] == x[n, c, h, w], in float32, float64 and int32.
TEST(TransposeTest, ReferenceMovesEveryElement) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32}) {
    SCOPED_TRACE(DTypeName(dtype));
    Graph g;
    Value x = *g.AddInput("x", {Shape{2, 3, 4, 5}, dtype});
    Value y = *g.AddOp1(ops::TransposeOp(), "t", {x}, Perm(ops::kNchwToNhwc));
    ir::ReferenceExecutor exec(g, /*float64=*/false, 1);
    std::vector<double> iota(120);
    std::iota(iota.begin(), iota.end(), 0.0);
    if (dtype == DType::kInt32) {
      ASSERT_TRUE(exec.SetLeaf("x", std::vector<int32_t>(iota.begin(), iota.end())).ok());
    } else {
      ASSERT_TRUE(exec.SetLeaf("x", iota).ok());
    }
    ASSERT_TRUE(exec.Run().ok());
    ir::HostTensor* out = *exec.Tensor(y);
    auto at = [&](int64_t i) -> double {
      switch (dtype) {
        case DType::kFloat32:
          return out->data<float>()[i];
        case DType::kFloat64:
          return out->data<double>()[i];
        case DType::kInt32:
          return out->data<int32_t>()[i];
      }
      return -1;
    };
    const ops::ImageDims nchw{2, 3, 4, 5, Layout::kNCHW}, nhwc{2, 3, 4, 5, Layout::kNHWC};
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t h = 0; h < 4; ++h) {
          for (int64_t w = 0; w < 5; ++w) {
            EXPECT_EQ(at(nhwc.Index(n, c, h, w)), static_cast<double>(nchw.Index(n, c, h, w)));
          }
        }
      }
    }
  }
}

class TransposeGradientTest : public ::testing::TestWithParam<const char*> {};

// x -> transpose -> flatten -> matmul -> softmax cross-entropy.
TEST_P(TransposeGradientTest, MatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{2, 3, 4, 5}}, TestInit());
  auto y = g.AddOp1(ops::TransposeOp(), "t", {x}, Perm(GetParam()));
  ASSERT_TRUE(y.ok()) << y.status();
  Value flat = *g.AddOp1(ops::FlattenOp(), "flatten", {*y});
  const int64_t rows = g.spec(flat).shape.dim(0);
  Value w = *g.AddParameter("head", {Shape{g.spec(flat).shape.dim(1), 3}}, TestInit());
  Value logits = *g.AddOp1(ops::MatmulOp(), "head_mm", {flat, w});
  Value labels = *g.AddInput("labels", {Shape{rows}, DType::kInt32});
  Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
  std::vector<int32_t> label_values(rows);
  for (int64_t i = 0; i < rows; ++i) label_values[i] = static_cast<int32_t>(i % 3);
  ExpectGradientsMatchFiniteDifferences(g, loss, label_values, 41);
}

INSTANTIATE_TEST_SUITE_P(Permutations, TransposeGradientTest,
                         ::testing::Values("0,2,3,1", "0,3,1,2", "3,1,0,2", "0,1,2,3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name.erase(std::remove(name.begin(), name.end(), ','), name.end());
                           return "Perm" + name;
                         });

TEST(TransposePlanTest, LayoutChangesAreBatchedTiledTransposes) {
  ops::TransposeLaunch to_nhwc = ops::PlanTranspose(Shape{8, 64, 56, 56}, {0, 2, 3, 1});
  EXPECT_EQ(to_nhwc.kind, ops::TransposeLaunch::Kind::kTiled);
  EXPECT_EQ(to_nhwc.batches, 8);
  EXPECT_EQ(to_nhwc.rows, 64);
  EXPECT_EQ(to_nhwc.cols, 56 * 56);
  ops::TransposeLaunch to_nchw = ops::PlanTranspose(Shape{8, 56, 56, 64}, {0, 3, 1, 2});
  EXPECT_EQ(to_nchw.kind, ops::TransposeLaunch::Kind::kTiled);
  EXPECT_EQ(to_nchw.batches, 8);
  EXPECT_EQ(to_nchw.rows, 56 * 56);
  EXPECT_EQ(to_nchw.cols, 64);
  // A batch of one drops out: one 2-D transpose.
  ops::TransposeLaunch single = ops::PlanTranspose(Shape{1, 3, 32, 32}, {0, 2, 3, 1});
  EXPECT_EQ(single.kind, ops::TransposeLaunch::Kind::kTiled);
  EXPECT_EQ(single.batches, 1);
  EXPECT_EQ(single.rows, 3);
  EXPECT_EQ(single.cols, 1024);
}

TEST(TransposePlanTest, OneByOneWeightsAndIdentityAreCopies) {
  for (const auto& [shape, perm] : {std::pair{Shape{256, 64, 1, 1}, ops::Permutation{0, 2, 3, 1}},
                                    std::pair{Shape{4, 5, 6, 7}, ops::Permutation{0, 1, 2, 3}},
                                    std::pair{Shape{1, 1, 1, 1}, ops::Permutation{3, 2, 1, 0}}}) {
    ops::TransposeLaunch plan = ops::PlanTranspose(shape, perm);
    EXPECT_EQ(plan.kind, ops::TransposeLaunch::Kind::kGather);
    EXPECT_EQ(plan.extents, (std::array<int64_t, 4>{1, 1, 1, shape.NumElements()}));
    EXPECT_EQ(plan.strides[3], 1);
  }
}

// What the GPU kernels compute for a plan, written for the host.
std::vector<int32_t> RunPlan(const ops::TransposeLaunch& plan, const std::vector<int32_t>& x) {
  std::vector<int32_t> y(x.size(), -1);
  if (plan.kind == ops::TransposeLaunch::Kind::kTiled) {
    for (int64_t b = 0; b < plan.batches; ++b) {
      const int64_t base = b * plan.rows * plan.cols;
      for (int64_t r = 0; r < plan.rows; ++r) {
        for (int64_t c = 0; c < plan.cols; ++c) {
          y[base + c * plan.rows + r] = x[base + r * plan.cols + c];
        }
      }
    }
    return y;
  }
  const auto& d = plan.extents;
  const auto& s = plan.strides;
  int64_t i = 0;
  for (int64_t a0 = 0; a0 < d[0]; ++a0) {
    for (int64_t a1 = 0; a1 < d[1]; ++a1) {
      for (int64_t a2 = 0; a2 < d[2]; ++a2) {
        for (int64_t a3 = 0; a3 < d[3]; ++a3) {
          y[i++] = x[a0 * s[0] + a1 * s[1] + a2 * s[2] + a3 * s[3]];
        }
      }
    }
  }
  return y;
}

// Every permutation of shapes with and without extents of 1: the plan's kernels move each element
// where the reference does.
TEST(TransposePlanTest, EmulatedPlanMatchesReferenceForEveryPermutation) {
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{1, 3, 1, 5}, Shape{2, 1, 4, 1},
                             Shape{3, 2, 1, 1}, Shape{1, 1, 1, 7}}) {
    for (const ops::Permutation& perm : AllPermutations()) {
      const std::string perm_text = ops::PermutationString(perm);
      SCOPED_TRACE(absl::StrCat(shape.ToString(), " perm ", perm_text));
      Graph g;
      Value x = *g.AddInput("x", {shape, DType::kInt32});
      Value y = *g.AddOp1(ops::TransposeOp(), "t", {x}, Perm(perm_text));
      ir::ReferenceExecutor exec(g, /*float64=*/false, 1);
      std::vector<int32_t> values(shape.NumElements());
      std::iota(values.begin(), values.end(), 0);
      ASSERT_TRUE(exec.SetLeaf("x", values).ok());
      ASSERT_TRUE(exec.Run().ok());
      const auto expected = (*exec.Tensor(y))->data<int32_t>();
      const std::vector<int32_t> got = RunPlan(ops::PlanTranspose(shape, perm), values);
      EXPECT_EQ(got, std::vector<int32_t>(expected.begin(), expected.end()));
    }
  }
}

TEST(TransposeKernelsTest, EveryKernelCompilesForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::TransposeKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
    EXPECT_NE(kernel.code.find(kernel.name), std::string::npos) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
