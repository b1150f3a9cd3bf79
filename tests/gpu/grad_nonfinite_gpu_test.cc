// grad_nonfinite (the non-finite guard's and loss scaling's check of the gradients) on the GPU
// against the CPU reference, flag for flag: float32, bfloat16 and float16 gradients side by side,
// with sizes that leave short last chunks (the element-by-element path) beside whole ones (the
// 16-byte loads), the largest finite values of each type (not flagged), an inf or a NaN in a whole
// chunk, in a short one and in a scalar; and more tensors than one launch's table holds. The same
// for grad_sum_squares_nonfinite (the check in the norm's pass): its flags as grad_nonfinite's,
// a finite value whose square overflows not flagged, its partial sums as grad_sum_squares'.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kChunk = codegen::kNormChunk;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct Gradient {
  std::string name;
  Shape shape;
  DType dtype;
  // (index, value) written over the random values.
  std::vector<std::pair<int64_t, double>> set;
};

// The gradients as constants of `g` and, with their set values, leaves of `cpu`.
std::vector<Value> AddGradients(Graph& g, const std::vector<Gradient>& gradients) {
  std::vector<Value> values;
  for (const Gradient& gradient : gradients) {
    values.push_back(*g.AddConstant(gradient.name, {gradient.shape, gradient.dtype},
                                    Initializer::Uniform(-2, 2)));
  }
  return values;
}
void SetGradients(ir::ReferenceExecutor& cpu, const std::vector<Gradient>& gradients) {
  for (const Gradient& gradient : gradients) {
    auto leaf = cpu.Leaf(gradient.name);
    ASSERT_TRUE(leaf.ok());
    std::vector<double> data((*leaf)->size());
    for (int64_t i = 0; i < (*leaf)->size(); ++i) data[i] = ir::FloatElement(**leaf, i);
    for (const auto& [index, value] : gradient.set) data[index] = value;
    ASSERT_TRUE(cpu.SetLeaf(gradient.name, data).ok());
  }
}

// Runs grad_nonfinite over `gradients` on the GPU and on the CPU reference and compares the flags
// exactly; returns the check's launches' descriptions, joined.
std::string ExpectFlagsMatch(const std::vector<Gradient>& gradients) {
  Graph g;
  const std::vector<Value> values = AddGradients(g, gradients);
  auto flags = g.AddOp1(ops::GradNonfiniteOp(), "check.flags", values);
  EXPECT_TRUE(flags.ok()) << flags.status();
  if (!flags.ok()) return "";
  ir::ReferenceExecutor cpu(g, false, 71);
  SetGradients(cpu, gradients);
  std::vector<std::string> described;
  ExpectGpuMatchesCpu(g, cpu, 0.0, {}, false, false, &described);
  std::string check;
  for (const std::string& d : described) {
    if (absl::StrContains(d, "grad_nonfinite")) absl::StrAppend(&check, d);
  }
  return check;
}

// grad_sum_squares_nonfinite over `gradients` (the last is the loss) on the GPU against the CPU
// reference: the flags equal, the partial sums equal bit for bit (inf and NaN alike).
void ExpectNormAndFlagsMatch(const std::vector<Gradient>& gradients) {
  Graph g;
  const std::vector<Value> values = AddGradients(g, gradients);
  auto both = g.AddOp(ops::GradSumSquaresNonfiniteOp(), "norm+check", values);
  ASSERT_TRUE(both.ok()) << both.status();
  ir::ReferenceExecutor cpu(g, false, 71);
  SetGradients(cpu, gradients);
  ASSERT_TRUE(cpu.Run().ok());
  auto gpu = RunOnGpu(g, cpu, *both);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (int k = 0; k < 2; ++k) {
    const ir::HostTensor& expected = **cpu.Tensor((*both)[k]);
    auto want = expected.data<float>();
    auto got = (*gpu)[k].data<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      EXPECT_TRUE(same) << (k == 0 ? "partial " : "flag ") << i << ": " << got[i] << " vs "
                        << want[i];
    }
  }
}

std::vector<Gradient> MixedGradients() {
  return {
      // Two whole chunks and a short one; the largest float is finite.
      {"f32", Shape{2 * kChunk + 5}, DType::kFloat32, {{kChunk + 7, kInf}, {3, 3.4e38}}},
      // Three whole chunks and a short one of three: a NaN in the short one only.
      {"bf16", Shape{3, kChunk + 1}, DType::kBFloat16, {{3 * kChunk + 1, kNan}, {9, 3.38e38}}},
      // Whole chunks only: an inf in the first element, the largest half finite elsewhere.
      {"f16", Shape{2 * kChunk}, DType::kFloat16, {{0, -kInf}, {kChunk + 11, 65504}}},
      {"clean_bf16", Shape{kChunk, 3}, DType::kBFloat16, {{5, -3.38e38}}},
      {"loss", Shape{}, DType::kFloat32, {{0, kNan}}},
      {"short_f16", Shape{37}, DType::kFloat16, {{36, kInf}}},
      {"clean_f32", Shape{kChunk - 1}, DType::kFloat32, {}},
  };
}

TEST(GradNonfiniteGpuTest, MixedTypesAndShortChunksMatchCpuFlags) {
  REPRISE_REQUIRE_GPU();
  EXPECT_THAT(ExpectFlagsMatch(MixedGradients()), HasSubstr("nvrtc reprise_grad_nonfinite"));
}

// The same gradients (clean_bf16's -3.38e38 squares to inf: its chunk is read again and found
// finite), with the loss last.
TEST(GradNonfiniteGpuTest, CheckInTheNormsPassMatchesCpu) {
  REPRISE_REQUIRE_GPU();
  std::vector<Gradient> gradients = MixedGradients();
  std::swap(gradients[4], gradients.back());  // The NaN loss last.
  ExpectNormAndFlagsMatch(gradients);
  gradients.back().set.clear();  // A finite loss.
  ExpectNormAndFlagsMatch(gradients);
}

TEST(GradNonfiniteGpuTest, AllFiniteGradientsSetNoFlag) {
  REPRISE_REQUIRE_GPU();
  ExpectFlagsMatch({{"a", Shape{5 * kChunk + 3}, DType::kBFloat16, {{4, 3.38e38}}},
                    {"b", Shape{kChunk}, DType::kFloat32, {{kChunk - 1, -3.4e38}}}});
}

// 600 tensors: a table of 512 and one of 88, their flags one after the other.
TEST(GradNonfiniteGpuTest, MoreTensorsThanOneTableTakeTwoLaunches) {
  REPRISE_REQUIRE_GPU();
  std::vector<Gradient> gradients;
  for (int t = 0; t < 600; ++t) {
    const DType dtype = t % 3 == 0   ? DType::kFloat32
                        : t % 3 == 1 ? DType::kBFloat16
                                     : DType::kFloat16;
    Gradient gradient{absl::StrCat("g", t), Shape{1 + (t * 37) % 5000}, dtype, {}};
    if (t == 7 || t == 550) gradient.set.push_back({0, kNan});
    gradients.push_back(std::move(gradient));
  }
  EXPECT_THAT(ExpectFlagsMatch(gradients), HasSubstr("; "));  // Two parts.
  gradients.push_back({"loss", Shape{}, DType::kFloat32, {}});
  ExpectNormAndFlagsMatch(gradients);
}

}  // namespace
}  // namespace reprise
