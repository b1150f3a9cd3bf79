// transpose on the GPU against the CPU reference, bit for bit: the tiled kernel on the layout
// changes (tile-aligned and ragged extents, images, conv weights), the gather kernel on every other
// permutation, and 1×1 weights (a copy).
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

// One parameter and one transpose per case, all in one graph.
void CheckTransposes(const std::vector<Case>& cases) {
  Graph g;
  for (size_t i = 0; i < cases.size(); ++i) {
    Value x = *g.AddParameter(absl::StrCat("x", i), {cases[i].shape}, Initializer::Uniform(-1, 1));
    auto y = g.AddOp1(ops::TransposeOp(), absl::StrCat("t", i), {x}, {{"perm", cases[i].perm}});
    ASSERT_TRUE(y.ok()) << y.status();
  }
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 17);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

TEST(TransposeGpuTest, LayoutChangesMatchCpuBitwise) {
  REPRISE_REQUIRE_GPU();
  CheckTransposes({{Shape{2, 64, 16, 16}, ops::kNchwToNhwc},
                   {Shape{2, 16, 16, 64}, ops::kNhwcToNchw},
                   {Shape{4, 37, 9, 11}, ops::kNchwToNhwc},  // Ragged tiles on both sides.
                   {Shape{4, 9, 11, 37}, ops::kNhwcToNchw},
                   {Shape{3, 3, 33, 31}, ops::kNchwToNhwc},  // Images: three rows per tile.
                   {Shape{3, 33, 31, 3}, ops::kNhwcToNchw},
                   {Shape{1, 130, 7, 7}, ops::kNchwToNhwc},  // A batch of one.
                   {Shape{64, 3, 7, 7}, ops::kNchwToNhwc},   // Conv weights and their gradients.
                   {Shape{128, 64, 3, 3}, ops::kNchwToNhwc},
                   {Shape{128, 3, 3, 64}, ops::kNhwcToNchw},
                   {Shape{256, 64, 1, 1}, ops::kNchwToNhwc}});  // A copy.
}

TEST(TransposeGpuTest, EveryPermutationMatchesCpuBitwise) {
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
