// The cast kernel gives the CPU reference's bits (round to nearest even both ways), and a node
// over 16-bit floats whose op has no such lowering is refused by name when the Trainer is made.
#include <cmath>

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

// dropout has no 16-bit lowering: a float16 dropout is refused by name at Create.
TEST(CastGpuTest, SixteenBitOpWithoutALoweringIsRefusedByName) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value x = *g.AddInput("x", {Shape{8, 16}});
  Value y = *g.AddInput("labels", {Shape{8}, DType::kInt32});
  Value w = *g.AddParameter("w", {Shape{16, 4}}, Initializer::Uniform(-1, 1));
  Value x16 = *g.AddOp1(ops::CastOp(), "x16", {x}, {{"dtype", std::string("f16")}});
  Value dropped = *nn::Dropout(g, x16, 0.5, "drop");
  Value x32 = *g.AddOp1(ops::CastOp(), "x32", {dropped}, {{"dtype", std::string("f32")}});
  Value z = *g.AddOp1(ops::MatmulOp(), "mm", {x32, w});
  Value loss = *nn::SoftmaxCrossEntropy(g, z, y, "loss");
  auto trainer = Trainer::Create(g, loss, {});
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(trainer.status().message(), HasSubstr("node 'drop'"));
  EXPECT_THAT(trainer.status().message(), HasSubstr("f16"));
}

// Mixed precision in either 16-bit type: an MLP lowers (matmuls, bias, ReLU and casts in 16 bits)
// and learns one batch; float16 scales its loss dynamically by default, and its scale settles on
// a power of two that keeps the gradients finite.
TEST(CastGpuTest, SixteenBitMlpsTrain) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 16, .depth = 1, .width = 32});
  ASSERT_TRUE(mlp.ok());
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TrainOptions options;
    options.numerics.compute_dtype = dtype;
    options.optimizer.learning_rate = 0.05f;
    auto trainer = Trainer::Create(mlp->graph, mlp->loss, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    std::vector<float> x(8 * 16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) / 11.0f - 0.5f;
    const std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
    ASSERT_TRUE((*trainer)->SetInput("features", x).ok());
    ASSERT_TRUE((*trainer)->SetInput("labels", y).ok());
    std::vector<float> losses;
    for (int s = 0; s < 60; ++s) {
      ASSERT_TRUE((*trainer)->Step().ok());
      losses.push_back(*(*trainer)->Loss());
    }
    EXPECT_LT(losses.back(), 0.5f * losses.front()) << ::testing::PrintToString(losses);
    const float scale = *(*trainer)->LossScale();
    const int64_t skipped = *(*trainer)->SkippedSteps();
    if (dtype == DType::kBFloat16) {
      EXPECT_EQ(scale, 1.0f);  // Off unless asked for.
      EXPECT_EQ(skipped, 0);
    } else {
      int exponent = 0;
      EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << scale;  // A power of two...
      EXPECT_LE(scale, 65536.0f);                              // ...at most GradScaler's start.
      EXPECT_EQ(scale, std::ldexp(65536.0f, -static_cast<int>(skipped)));  // No growth in 60.
    }
  }
}

}  // namespace
}  // namespace reprise
