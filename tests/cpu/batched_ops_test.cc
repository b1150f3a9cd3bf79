// The batched ops of ensemble batching: gradients against central finite differences in float64,
// each model's slice equal to the unbatched op on that model's slices, and their kernels compile.
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/batched_kernels.h"
#include "src/ir/initializer.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::TestInit;

// Two models, batch 4, 3 classes.
const std::vector<int32_t> kLabels = {2, 0, 1, 2, 1, 1, 0, 2};

// Ends a [2, 4, 3] value in the batched loss, summed over the models.
Value Loss(Graph& g, Value logits) {
  Value labels = *g.AddInput("labels", {Shape{2, 4}, DType::kInt32});
  Value losses = *g.AddOp1(ops::BatchedSoftmaxCrossEntropyOp(), "losses", {logits, labels});
  return *g.AddOp1(ops::ModelSumOp(), "loss", {losses});
}

class BatchedMatmulGradientTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(BatchedMatmulGradientTest, MatchesFiniteDifferences) {
  const auto [ta, tb] = GetParam();
  Graph g;
  Value a = *g.AddParameter("a", {ta ? Shape{2, 5, 4} : Shape{2, 4, 5}}, TestInit());
  Value b = *g.AddParameter("b", {tb ? Shape{2, 3, 5} : Shape{2, 5, 3}}, TestInit());
  Value c =
      *g.AddOp1(ops::BatchedMatmulOp(), "mm", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}});
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, c), kLabels, 11);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, BatchedMatmulGradientTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(BatchedOpsGradientTest, BiasAddMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{2, 4, 3}}, TestInit());
  Value b = *g.AddParameter("b", {Shape{2, 3}}, TestInit());
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *g.AddOp1(ops::BatchedBiasAddOp(), "", {x, b})),
                                        kLabels, 12);
}

TEST(BatchedOpsGradientTest, LossAndModelSumMatchFiniteDifferences) {
  Graph g;
  Value z = *g.AddParameter("z", {Shape{2, 4, 3}}, TestInit());
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, z), kLabels, 13);
}

TEST(BatchedOpsTest, ShapeRulesNameTheMismatch) {
  Graph g;
  Value a = *g.AddParameter("a", {Shape{2, 4, 5}}, TestInit());
  Value b3 = *g.AddParameter("b3", {Shape{3, 5, 3}}, TestInit());
  EXPECT_THAT(g.AddOp1(ops::BatchedMatmulOp(), "mm", {a, b3}).status().message(),
              ::testing::HasSubstr("same positive model count"));
  Value bias = *g.AddParameter("bias", {Shape{2, 4}}, TestInit());
  EXPECT_THAT(g.AddOp1(ops::BatchedBiasAddOp(), "bb", {a, bias}).status().message(),
              ::testing::HasSubstr("[models, columns]"));
  Value labels = *g.AddInput("labels", {Shape{2, 3}, DType::kInt32});
  EXPECT_THAT(g.AddOp1(ops::BatchedSoftmaxCrossEntropyOp(), "xent", {a, labels}).status().message(),
              ::testing::HasSubstr("do not match"));
  Value scalar = *g.AddParameter("s", {Shape{}}, TestInit());
  EXPECT_FALSE(g.AddOp1(ops::ModelBroadcastOp(), "bc", {scalar}, {{"models", int64_t{0}}}).ok());
}

// Runs `graph` once on the CPU reference in float32 and returns the value `v`.
std::vector<float> RunAndRead(const Graph& graph, Value v, uint64_t seed) {
  ir::ReferenceExecutor exec(graph, /*float64=*/false, seed);
  EXPECT_TRUE(exec.Run().ok());
  auto t = exec.Tensor(v);
  EXPECT_TRUE(t.ok());
  auto data = (*t)->data<float>();
  return {data.begin(), data.end()};
}

// Model k's slice of a stacked batched_matmul_bias with ReLU is the unbatched matmul_bias of its
// slices, bit for bit (both references accumulate each entry in double, in the same order).
TEST(BatchedOpsTest, FusedLayerSliceEqualsUnbatchedLayer) {
  constexpr int kModels = 3;
  Graph batched;
  Value x = *batched.AddParameter("x", {Shape{kModels, 4, 5}}, TestInit());
  Value w = *batched.AddParameter("w", {Shape{kModels, 6, 5}}, TestInit());
  Value b = *batched.AddParameter("b", {Shape{kModels, 6}}, TestInit());
  Value y = *batched.AddOp1(ops::BatchedMatmulBiasOp(), "layer", {x, w, b},
                            {{"transpose_b", true}, {"relu", true}});
  const std::vector<float> all = RunAndRead(batched, y, 7);
  ir::ReferenceExecutor source(batched, false, 7);
  for (int k = 0; k < kModels; ++k) {
    Graph single;
    Value xs = *single.AddInput("x", {Shape{4, 5}});
    Value ws = *single.AddInput("w", {Shape{6, 5}});
    Value bs = *single.AddInput("b", {Shape{6}});
    Value ys = *single.AddOp1(ops::MatmulBiasOp(), "layer", {xs, ws, bs},
                              {{"transpose_b", true}, {"relu", true}});
    ir::ReferenceExecutor exec(single, false, 0);
    for (const char* name : {"x", "w", "b"}) {
      ir::HostTensor* whole = *source.Leaf(name);
      const int64_t per_model = whole->size() / kModels;
      auto data = whole->data<float>().subspan(k * per_model, per_model);
      ASSERT_TRUE(exec.SetLeaf(name, std::vector<double>(data.begin(), data.end())).ok());
    }
    ASSERT_TRUE(exec.Run().ok());
    auto got = (*exec.Tensor(ys))->data<float>();
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      EXPECT_EQ(got[i], all[k * got.size() + i]) << "model " << k << " element " << i;
    }
  }
}

TEST(BatchedOpsTest, ModelSumAddsInIndexOrderAndBroadcastFills) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{3}});
  Value s = *g.AddOp1(ops::ModelSumOp(), "sum", {x});
  Value back = *g.AddOp1(ops::ModelBroadcastOp(), "back", {s}, {{"models", int64_t{4}}});
  ir::ReferenceExecutor exec(g, false, 0);
  ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{1e8, 1.0, -1e8}).ok());
  ASSERT_TRUE(exec.Run().ok());
  const float expected = (1e8f + 1.0f) + -1e8f;  // Not 1: the order of a left-to-right chain.
  EXPECT_EQ((*exec.Tensor(s))->data<float>()[0], expected);
  for (float v : (*exec.Tensor(back))->data<float>()) EXPECT_EQ(v, expected);
}

TEST(BatchedOpsTest, LabelsOutsideTheClassesAreRefusedByModel) {
  Graph g;
  Value z = *g.AddInput("z", {Shape{2, 1, 3}});
  Value labels = *g.AddInput("labels", {Shape{2, 1}, DType::kInt32});
  ASSERT_TRUE(g.AddOp1(ops::BatchedSoftmaxCrossEntropyOp(), "xent", {z, labels}).ok());
  ir::ReferenceExecutor exec(g, false, 0);
  ASSERT_TRUE(exec.SetLeaf("labels", std::vector<int32_t>{0, 3}).ok());
  EXPECT_THAT(exec.Run().message(), ::testing::HasSubstr("model 1"));
}

TEST(BatchedOpsTest, ModelTileRepeatsFloatsAndLabelsPerModel) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2}});
  Value labels = *g.AddInput("labels", {Shape{2}, DType::kInt32});
  Value xt = *g.AddOp1(ops::ModelTileOp(), "xt", {x}, {{"models", int64_t{3}}});
  Value lt = *g.AddOp1(ops::ModelTileOp(), "lt", {labels}, {{"models", int64_t{3}}});
  EXPECT_EQ(g.spec(lt), (TensorSpec{Shape{3, 2}, DType::kInt32}));
  EXPECT_FALSE(g.AddOp1(ops::ModelTileOp(), "bad", {x}, {{"models", int64_t{0}}}).ok());
  ir::ReferenceExecutor exec(g, false, 0);
  ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{1.5, -2}).ok());
  ASSERT_TRUE(exec.SetLeaf("labels", std::vector<int32_t>{4, 7}).ok());
  ASSERT_TRUE(exec.Run().ok());
  auto xs = (*exec.Tensor(xt))->data<float>();
  EXPECT_EQ(std::vector<float>(xs.begin(), xs.end()),
            (std::vector<float>{1.5f, -2.f, 1.5f, -2.f, 1.5f, -2.f}));
  auto ls = (*exec.Tensor(lt))->data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(ls.begin(), ls.end()), (std::vector<int32_t>{4, 7, 4, 7, 4, 7}));
}

TEST(BatchedKernelsTest, EveryKernelCompilesForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::BatchedKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
