// The chunked optimizer kernels reading float32, bfloat16 and float16 gradients side by side
// (codegen::GradKinds): grad_sum_squares and adam_multi (AdamW, warm-up schedule, clip norm folded
// in; plain, loss-scaled and skipped) give the CPU reference's bits over two tables of odd-sized
// tensors, reading the 16-bit gradients themselves and reading their float32 casts (the path
// before the fold) alike, so the two paths give the same bits; cast_multi gives the casts' bits.
// Then mixed-precision MLPs trained with AdamW, clipping and the guard (float16: loss scaling
// too) replay eager bit for bit, and a small GPT-2 in bfloat16 trains bit for bit as on the
// float32-gradient path.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "tests/cpu/sixteen_bit_gradient_step.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/small_gpt2.h"

namespace reprise {
namespace {

TEST(SixteenBitGradientsGpuTest, NormAndAdamMultiGiveTheCpuBitsForMixedGradientTypes) {
  REPRISE_REQUIRE_GPU();
  for (const char* mode : {"plain", "scaled", "skipped"}) {
    for (bool widening_casts : {false, true}) {
      SCOPED_TRACE(absl::StrCat(mode, widening_casts ? ", through casts" : ", 16-bit read"));
      const bool scaled = std::string(mode) != "plain";
      // 600 tensors: two launches of each kernel, 512 tensors and 88.
      auto step = testing::BuildSixteenBitGradientStep(600, widening_casts, scaled);
      ASSERT_TRUE(step.ok()) << step.status();
      ir::ReferenceExecutor cpu(step->graph, false, 5);
      ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{7, 0}).ok());
      if (scaled) {
        const double found = std::string(mode) == "skipped" ? 1 : 0;
        ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, found}).ok());
      }
      ExpectGpuMatchesCpu(step->graph, cpu, /*tolerance=*/0);
    }
  }
}

// The norm alone over 700 tensors: two launches, the second's partial sums after the first's.
TEST(SixteenBitGradientsGpuTest, NormOfMixedGradientTypesIsTheCpuBits) {
  REPRISE_REQUIRE_GPU();
  for (bool scaled : {false, true}) {
    Graph g;
    std::vector<Value> grads;
    for (int t = 0; t < 700; ++t) {
      grads.push_back(*g.AddConstant("g" + std::to_string(t),
                                     {testing::GradientStepShape(t), testing::GradientTypeOf(t)},
                                     Initializer::Uniform(-1, 1)));
    }
    Attrs attrs;
    if (scaled) {
      grads.push_back(*g.AddInput("check", {Shape{2}}, Initializer::Zeros()));
      attrs["loss_scaled"] = true;
    }
    ASSERT_TRUE(g.AddOp1(ops::GradSumSquaresOp(), "partials", grads, attrs).ok());
    ir::ReferenceExecutor cpu(g, false, 8);
    if (scaled) {
      ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, 0}).ok());
    }
    ExpectGpuMatchesCpu(g, cpu, /*tolerance=*/0);
  }
}

// cast_multi over 600 parameters of odd sizes (two launches; each tensor's tail element by
// element) gives the casts' bits, to bfloat16 and to float16 (values near float16's largest).
TEST(SixteenBitGradientsGpuTest, CastMultiGivesTheCpuBits) {
  REPRISE_REQUIRE_GPU();
  for (DType to : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(to));
    Graph g;
    std::vector<Value> x;
    for (int t = 0; t < 600; ++t) {
      x.push_back(*g.AddParameter("p" + std::to_string(t), {testing::GradientStepShape(t)},
                                  Initializer::Uniform(-60000, 60000)));
    }
    ASSERT_TRUE(
        g.AddOp(ops::CastMultiOp(), "parameters.to_16", x, {{"dtype", ops::DTypeAttr(to)}}).ok());
    ir::ReferenceExecutor cpu(g, false, 9);
    ExpectGpuMatchesCpu(g, cpu, /*tolerance=*/0);
  }
}

// An MLP in bfloat16 and float16 with AdamW, clipping, a schedule and the guard: the plan's
// updates read the 16-bit gradients, and graph replays give the eager steps' bits, with the step
// launched from the host and from the device (kAuto launches a step of 64 nodes or more from the
// device).
class SixteenBitReplayGpuTest : public ::testing::TestWithParam<GraphLaunch> {};

TEST_P(SixteenBitReplayGpuTest, MixedPrecisionAdamWMlpReplaysEagerBitForBit) {
  REPRISE_REQUIRE_GPU();
  if (GetParam() == GraphLaunch::kDevice && testing::UnderRacecheck()) {
    GTEST_SKIP() << "racecheck does not support device-side launches; the host-launched case "
                    "runs under it";
  }
  for (DType compute : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(compute));
    auto mlp = models::BuildMlp(
        {.batch = 32, .input_features = 64, .depth = 4, .width = 256, .classes = 10});
    ASSERT_TRUE(mlp.ok()) << mlp.status();
    TrainOptions options;
    options.seed = 3;
    options.numerics.compute_dtype = compute;
    options.numerics.deterministic = true;
    options.launch.graph_launch = GetParam();
    options.optimizer = OptimizerOptions{
        .kind = OptimizerKind::kAdamW,
        .learning_rate = 1e-3f,
        .weight_decay = 0.1f,
        .decay_rank1 = false,
        .max_grad_norm = 0.5f,
        .schedule = {.warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 50}};
    auto trainer = Trainer::Create(mlp->graph, mlp->loss, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_EQ((*trainer)->stats().device_graph_launch, GetParam() == GraphLaunch::kDevice);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1, 1);
    std::vector<float> features(32 * 64);
    for (float& x : features) x = uniform(rng);
    std::vector<int32_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    ASSERT_TRUE((*trainer)->SetInput("features", features).ok());
    ASSERT_TRUE((*trainer)->SetInput("labels", labels).ok());
    ASSERT_TRUE((*trainer)->Step().ok());
    auto result = (*trainer)->Verify(5);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(result->ok()) << result->ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Launches, SixteenBitReplayGpuTest,
                         ::testing::Values(GraphLaunch::kHost, GraphLaunch::kDevice),
                         [](const ::testing::TestParamInfo<GraphLaunch>& info) {
                           return std::string(info.param == GraphLaunch::kHost ? "host" : "device");
                         });

// A small GPT-2 in bfloat16 with nanoGPT's AdamW (clipping, warm-up and cosine) and the guard,
// against the float32-gradient path: a one-rank data-parallel trainer averages the float32 casts
// of the gradients (its norm, guard and updates read float32 gradients, as every trainer did before
// the fold), while the plain trainer's read the 16-bit ones. Five steps give the same losses and
// parameters bit for bit.
TEST(SixteenBitGradientsGpuTest, Gpt2Bf16StepsEqualTheFloat32GradientPathBitForBit) {
  REPRISE_REQUIRE_GPU();
  const models::Gpt2Config c = testing::kSmallGpt2;
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  TrainOptions options = testing::SmallGpt2Bf16AdamW();
  auto plain = Trainer::Create(gpt->graph, gpt->loss, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto id = NewDataParallelId();
  ASSERT_TRUE(id.ok()) << id.status();
  options.parallel.data_parallel = DataParallel{.rank = 0, .world_size = 1, .id = *id};
  auto averaged = Trainer::Create(gpt->graph, gpt->loss, options);
  ASSERT_TRUE(averaged.ok()) << averaged.status();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab) - 1);
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> tokens, targets;
    for (int64_t i = 0; i < c.batch * c.seq; ++i) {
      tokens.push_back(token(rng));
      targets.push_back((tokens.back() * 3 + 1) % static_cast<int32_t>(c.vocab));
    }
    for (Trainer* t : {plain->get(), averaged->get()}) {
      ASSERT_TRUE(t->SetInput("tokens", tokens).ok());
      ASSERT_TRUE(t->SetInput("targets", targets).ok());
      ASSERT_TRUE(t->Step().ok());
    }
    ASSERT_EQ(*(*plain)->Loss(), *(*averaged)->Loss()) << "step " << step;
  }
  for (const std::string& name : (*plain)->ParameterNames()) {
    auto a = (*plain)->GetParameter(name);
    auto b = (*averaged)->GetParameter(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(*a, *b) << name;
  }
}

}  // namespace
}  // namespace reprise
