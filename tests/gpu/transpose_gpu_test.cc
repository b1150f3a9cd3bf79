// transpose on the GPU against the CPU reference, bit for bit, in float32 and bfloat16 (the
// channels-last pass moves mixed-precision activations): the tiled kernel on the layout changes
// (tile-aligned and ragged extents, images, conv weights; odd 16-bit widths start rows at 2-byte
// but not 4-byte offsets), the gather kernel on every other permutation, and 1×1 weights (a copy).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/transpose.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct Case {
  Shape shape;
  std::string perm;
};

class TransposeGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  // One random tensor and one transpose per case, all in one graph. A constant, so that bfloat16
  // is allowed (parameters are float32 by rule).
  void CheckTransposes(const std::vector<Case>& cases) {
    const DType dtype = GetParam();
    Graph g;
    for (size_t i = 0; i < cases.size(); ++i) {
      Value x = *g.AddConstant(absl::StrCat("x", i), {cases[i].shape, dtype},
                               Initializer::Uniform(-1, 1));
      auto y = g.AddOp1(ops::TransposeOp(), absl::StrCat("t", i), {x}, {{"perm", cases[i].perm}});
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(g.spec(*y).dtype, dtype);
    }
    ir::ReferenceExecutor cpu(g, /*float64=*/false, 17);
    ExpectGpuMatchesCpu(g, cpu, 0.0);
  }
};

TEST_P(TransposeGpuTest, LayoutChangesMatchCpuBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckTransposes({{Shape{2, 64, 16, 16}, ops::kNchwToNhwc},
                   {Shape{2, 16, 16, 64}, ops::kNhwcToNchw},
                   {Shape{4, 37, 9, 11}, ops::kNchwToNhwc},  // Ragged tiles, odd widths.
                   {Shape{4, 9, 11, 37}, ops::kNhwcToNchw},
                   {Shape{3, 3, 33, 31}, ops::kNchwToNhwc},  // Images: three rows per tile.
                   {Shape{3, 33, 31, 3}, ops::kNhwcToNchw},
                   {Shape{1, 130, 7, 7}, ops::kNchwToNhwc},  // A batch of one.
                   {Shape{64, 3, 7, 7}, ops::kNchwToNhwc},   // Conv weights and their gradients.
                   {Shape{128, 64, 3, 3}, ops::kNchwToNhwc},
                   {Shape{128, 3, 3, 64}, ops::kNhwcToNchw},
                   {Shape{256, 64, 1, 1}, ops::kNchwToNhwc}});  // A copy.
}

TEST_P(TransposeGpuTest, EveryPermutationMatchesCpuBitwise) {
  REPRISE_REQUIRE_GPU();
  std::vector<Case> cases;
  ops::Permutation p{0, 1, 2, 3};
  do {
    cases.push_back({Shape{3, 5, 7, 2}, ops::PermutationString(p)});
    cases.push_back({Shape{2, 1, 6, 5}, ops::PermutationString(p)});
  } while (std::next_permutation(p.begin(), p.end()));
  CheckTransposes(cases);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TransposeGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace reprise
