// The cast kernel gives the CPU reference's bits (round to nearest even both ways), and a node
// over 16-bit floats whose op has no such lowering is refused by name when the Trainer is made.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

TEST(CastGpuTest, RoundTripsThroughBFloat16AndHalfMatchTheCpuBitForBit) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddParameter("x", {Shape{1000, 33}}, Initializer::Uniform(-300, 300));
  for (const char* type : {"bf16", "f16"}) {
    Value low =
        *g.AddOp1(ops::CastOp(), absl::StrCat("to_", type), {x}, {{"dtype", std::string(type)}});
    ASSERT_TRUE(
        g.AddOp1(ops::CastOp(), absl::StrCat("from_", type), {low}, {{"dtype", std::string("f32")}})
            .ok());
  }
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 5);
  ExpectGpuMatchesCpu(g, cpu, /*tolerance=*/0);
}

// matmul lowers bfloat16 but not float16.
TEST(CastGpuTest, SixteenBitMatmulWithoutALoweringIsRefusedByName) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddInput("x", {Shape{8, 16}});
  Value y = *g.AddInput("labels", {Shape{8}, DType::kInt32});
  Value w = *g.AddParameter("w", {Shape{16, 4}}, Initializer::Uniform(-1, 1));
  Value x16 = *g.AddOp1(ops::CastOp(), "x16", {x}, {{"dtype", std::string("f16")}});
  Value w16 = *g.AddOp1(ops::CastOp(), "w16", {w}, {{"dtype", std::string("f16")}});
  Value z16 = *g.AddOp1(ops::MatmulOp(), "mm", {x16, w16});
  Value z = *g.AddOp1(ops::CastOp(), "z", {z16}, {{"dtype", std::string("f32")}});
  Value loss = *nn::SoftmaxCrossEntropy(g, z, y, "loss");
  auto trainer = Trainer::Create(g, loss, {});
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(trainer.status().message(), HasSubstr("node 'mm'"));
  EXPECT_THAT(trainer.status().message(), HasSubstr("f16"));
}

// Mixed precision builds its bfloat16 graph, then stops at the first op without a bfloat16
// lowering rather than run float32 kernels on 16-bit data; float16 is refused outright.
// A bfloat16 MLP lowers (matmuls, bias, ReLU and casts in bf16) and learns one batch; float16
// waits for loss scaling.
TEST(CastGpuTest, BFloat16MlpTrainsAndFloat16IsRefused) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 16, .depth = 1, .width = 32});
  ASSERT_TRUE(mlp.ok());
  TrainOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.sgd.learning_rate = 0.05f;
  auto bf16 = Trainer::Create(mlp->graph, mlp->loss, options);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  std::vector<float> x(8 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) / 11.0f - 0.5f;
  const std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE((*bf16)->SetInput("features", x).ok());
  ASSERT_TRUE((*bf16)->SetInput("labels", y).ok());
  std::vector<float> losses;
  for (int s = 0; s < 60; ++s) {
    ASSERT_TRUE((*bf16)->Step().ok());
    losses.push_back(*(*bf16)->Loss());
  }
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << ::testing::PrintToString(losses);
  options.compute_dtype = DType::kFloat16;
  auto f16 = Trainer::Create(mlp->graph, mlp->loss, options);
  EXPECT_EQ(f16.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f16.status().message(), HasSubstr("loss scaling"));
}

}  // namespace
}  // namespace reprise
