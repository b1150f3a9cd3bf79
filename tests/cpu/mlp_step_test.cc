// mlp_train_step without a GPU: bad nodes get clear errors, the shape check knows its limits, and
// its CPU reference equals the unfused training graph (BuildMlp + BuildTrainingGraph) step for
// step. The kernel generator has its own test (mlp_step_kernel_test.cc).
#include "src/ops/mlp_step.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/initializer.h"
#include "src/ir/reference_executor.h"
#include "tests/cpu/mlp_step_graph.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

models::MlpConfig Config(int64_t batch, int64_t features, int64_t depth, int64_t width,
                         int64_t classes) {
  return {.batch = batch,
          .input_features = features,
          .depth = depth,
          .width = width,
          .classes = classes};
}

TEST(MlpStepTest, EveryWeightAndVelocityAndTheBarrierIsWrittenInPlace) {
  auto f = testing::BuildFusedMlpStep(Config(4, 3, 2, 5, 3), {});
  ASSERT_TRUE(f.ok()) << f.status();
  const Node& node = f->graph.node(f->node);
  std::vector<int> expected;
  for (int i = 6; i < 6 + 4 * 3 + 1; ++i) expected.push_back(i);
  EXPECT_EQ(ir::MutatedInputs(node), expected);
  EXPECT_EQ(node.outputs[0].ToString(), "f32[]");
  EXPECT_EQ(node.outputs[1].ToString(), "f32[4, 3]");
  // Row losses 32 + h_1, h_2: 2 * 32 + dz_0, dz_1, dz_2: 3 * 32.
  EXPECT_EQ(node.outputs[2].ToString(), "f32[192]");
  EXPECT_EQ(ops::MlpTrainStepWorkspaceFloats(32, {256, 256, 10}), 32 + 8192 + 8192 + 320);
}

// Rebuilds the fused node's inputs with one of them replaced.
absl::Status AddWith(int index, TensorSpec spec, int64_t layers_attr = 2) {
  auto f = testing::BuildFusedMlpStep(Config(4, 3, 1, 5, 3), {});
  if (!f.ok()) return f.status();
  Graph& g = f->graph;
  std::vector<Value> in = g.node(f->node).inputs;
  if (index >= 0) {
    auto v = spec.dtype == DType::kInt32
                 ? g.AddState("replacement", spec, Initializer::Zeros())
                 : g.AddParameter("replacement", spec, Initializer::Zeros());
    if (!v.ok()) return v.status();
    in[index] = *v;
  }
  return g.AddOp(ops::MlpTrainStepOp(), "step2", in, {{"layers", layers_attr}}).status();
}

TEST(MlpStepTest, InvalidInputsAreNamed) {
  // Layer 1 of a 2-layer MLP: W_1 is [3, 5].
  EXPECT_THAT(AddWith(10, {Shape{3, 4}}).message(),
              AllOf(HasSubstr("step2"), HasSubstr("input 10 (W_1)"), HasSubstr("f32[3, 4]")));
  EXPECT_THAT(AddWith(11, {Shape{4}}).message(), HasSubstr("input 11 (b_1) must be f32[3]"));
  EXPECT_THAT(AddWith(12, {Shape{3, 4}}).message(), HasSubstr("velocity of W_1"));
  EXPECT_THAT(std::string(AddWith(1, {Shape{4}}).message()),
              HasSubstr("input 1 (labels) must be i32[4]"));
  EXPECT_THAT(AddWith(3, {Shape{1}}).message(), HasSubstr("(learning_rate) must be a f32 scalar"));
  EXPECT_THAT(AddWith(14, {Shape{32}, DType::kInt32}).message(),
              HasSubstr("input 14 (barrier) must be i32[64]"));
  EXPECT_THAT(AddWith(-1, {}, 3).message(), HasSubstr("takes 19 inputs, got 15"));
  EXPECT_THAT(AddWith(-1, {}, 0).message(), HasSubstr("'layers' must be >= 1"));
  EXPECT_EQ(AddWith(-1, {}).code(), absl::StatusCode::kOk);
}

TEST(MlpStepTest, ShapeCheckNeedsNoGpuAndNamesItsLimits) {
  auto specs = [](const models::MlpConfig& c) {
    auto f = testing::BuildFusedMlpStep(c, {});
    std::vector<TensorSpec> s;
    for (const Value& v : f->graph.node(f->node).inputs) s.push_back(f->graph.spec(v));
    return s;
  };
  const codegen::MlpStepTarget h100;
  std::string why;
  EXPECT_TRUE(ops::MlpTrainStepSupported(specs(Config(32, 256, 8, 256, 10)), h100, &why)) << why;
  EXPECT_TRUE(ops::MlpTrainStepSupported(specs(Config(256, 1024, 4, 1024, 10)), h100, &why)) << why;
  EXPECT_TRUE(ops::MlpTrainStepSupported(specs(Config(5, 3, 2, 7, 3)), h100, &why)) << why;
  EXPECT_FALSE(ops::MlpTrainStepSupported(specs(Config(8, 64, 1, 1024, 1000)), h100, &why));
  EXPECT_THAT(why, AllOf(HasSubstr("1000 classes"), HasSubstr("shared memory")));
  std::vector<TensorSpec> too_few = specs(Config(4, 3, 1, 5, 3));
  too_few.pop_back();
  EXPECT_EQ(ops::CheckMlpTrainStepSupported(too_few, h100).code(),
            absl::StatusCode::kInvalidArgument);
}

double MaxRelError(const ir::HostTensor& got, const ir::HostTensor& want) {
  double err = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double a = want.dtype() == DType::kFloat64 ? got.data<double>()[i] : got.data<float>()[i];
    const double b =
        want.dtype() == DType::kFloat64 ? want.data<double>()[i] : want.data<float>()[i];
    err = std::max(err, std::abs(a - b) / std::max(1e-3, std::abs(b)));
  }
  return err;
}

class MlpStepReferenceTest : public ::testing::TestWithParam<std::tuple<models::MlpConfig, bool>> {
};

TEST_P(MlpStepReferenceTest, EqualsUnfusedTrainingGraphOverThreeSteps) {
  const auto& [config, float64] = GetParam();
  const SgdOptions sgd{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  auto mlp = models::BuildMlp(config);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto unfused = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, sgd);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  auto fused = testing::BuildFusedMlpStep(config, sgd);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ir::ReferenceExecutor want(unfused->graph, float64, 7);
  ir::ReferenceExecutor got(fused->graph, float64, 8);
  std::vector<int32_t> labels(config.batch);
  for (int64_t i = 0; i < config.batch; ++i) labels[i] = (i * 7 + 1) % config.classes;
  ASSERT_TRUE(want.SetLeaf("labels", labels).ok());
  ir::FillInitial(testing::TestInit(), 7, "features", **want.Leaf("features"));
  ASSERT_TRUE(testing::CopyLeavesByName(unfused->graph, want, fused->graph, got).ok());
  const double tolerance = float64 ? 1e-12 : 1e-5;
  const Node& node = fused->graph.node(fused->node);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(want.Run().ok());
    ASSERT_TRUE(got.Run().ok());
    EXPECT_LE(MaxRelError(**got.Tensor(fused->loss), **want.Tensor(mlp->loss)), tolerance)
        << "loss, step " << step;
    EXPECT_LE(MaxRelError(**got.Tensor(fused->logits), **want.Tensor(mlp->logits)), tolerance)
        << "logits, step " << step;
  }
  for (int index : ir::MutatedInputs(node)) {
    const std::string& name = fused->graph.node(node.inputs[index].node).name;
    if (name == "mlp_step.barrier") continue;
    EXPECT_LE(MaxRelError(**got.Leaf(name), **want.Leaf(name)), tolerance) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlpStepReferenceTest,
                         ::testing::Combine(::testing::Values(Config(5, 3, 2, 7, 3),
                                                              Config(6, 4, 0, 1, 5),
                                                              Config(8, 12, 3, 16, 10)),
                                            ::testing::Bool()));

}  // namespace
}  // namespace reprise
