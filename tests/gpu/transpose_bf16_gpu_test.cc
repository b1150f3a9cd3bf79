// transpose of bfloat16 tensors (the channels-last pass moves mixed-precision activations) on the
// GPU against the CPU reference, bit for bit: the 16-bit tiled kernel on the layout changes
// (tile-aligned and ragged extents, odd widths so that rows start at 2-byte but not 4-byte
// offsets), the 16-bit gather kernel on every other permutation.
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

// One bfloat16 constant (parameters are float32 by rule) and one transpose per case.
void CheckTransposes(const std::vector<Case>& cases) {
  Graph g;
  for (size_t i = 0; i < cases.size(); ++i) {
    Value x = *g.AddConstant(absl::StrCat("x", i), {cases[i].shape, DType::kBFloat16},
                             Initializer::Uniform(-1, 1));
    auto y = g.AddOp1(ops::TransposeOp(), absl::StrCat("t", i), {x}, {{"perm", cases[i].perm}});
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(g.spec(*y).dtype, DType::kBFloat16);
  }
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 61);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

TEST(TransposeBf16GpuTest, LayoutChangesMatchCpuBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckTransposes({{Shape{2, 64, 16, 16}, ops::kNchwToNhwc},
                   {Shape{2, 16, 16, 64}, ops::kNhwcToNchw},
                   {Shape{4, 37, 9, 11}, ops::kNchwToNhwc},  // Ragged tiles, odd widths.
                   {Shape{4, 9, 11, 37}, ops::kNhwcToNchw},
                   {Shape{3, 3, 33, 31}, ops::kNchwToNhwc},  // Images: three rows per tile.
                   {Shape{3, 33, 31, 3}, ops::kNhwcToNchw},
                   {Shape{128, 3, 3, 64}, ops::kNhwcToNchw},
                   {Shape{256, 64, 1, 1}, ops::kNchwToNhwc}});  // A copy.
}

TEST(TransposeBf16GpuTest, EveryPermutationMatchesCpuBitwise) {
  REPRISE_REQUIRE_GPU();
  std::vector<Case> cases;
  ops::Permutation p{0, 1, 2, 3};
  do {
    cases.push_back({Shape{3, 5, 7, 2}, ops::PermutationString(p)});
    cases.push_back({Shape{2, 1, 6, 5}, ops::PermutationString(p)});
  } while (std::next_permutation(p.begin(), p.end()));
  CheckTransposes(cases);
}

}  // namespace
}  // namespace reprise
