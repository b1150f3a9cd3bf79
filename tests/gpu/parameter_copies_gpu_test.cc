// The parameters' 16-bit copies kept between steps and written by AdamW (src/passes/
// parameter_copies.h) on the GPU: a small GPT-2 in bfloat16 trains bit for bit as with a cast of
// every weight at each step's start, through the host writing weights (SetParameter, LoadWeights,
// RestoreCheckpoint), each of which makes the next step round them again; and the captured step
// replays its eager run bit for bit, after a host write and with the copies current; and the
// kernels give the CPU reference's bits.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/cpu/sixteen_bit_gradient_step.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/small_gpt2.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

constexpr models::Gpt2Config kSmall = testing::kSmallGpt2;

TrainOptions Bf16AdamW(bool keep_copies) {
  TrainOptions options = testing::SmallGpt2Bf16AdamW();
  options.kernels.update_writes_parameter_copies = keep_copies;
  return options;
}

// The layer norms' float32 weights, which have no 16-bit copy (each block's two and the last).
int64_t LayerNormParameterBytes(const models::Gpt2Config& c) {
  return (2 * c.layers + 1) * 2 * c.width * static_cast<int64_t>(sizeof(float));
}

// One step of each trainer on the same batch; their losses must agree bit for bit.
void StepBoth(Trainer& kept, Trainer& cast, std::mt19937& rng, const std::string& when) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(kSmall.vocab) - 1);
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i < kSmall.batch * kSmall.seq; ++i) {
    tokens.push_back(token(rng));
    targets.push_back((tokens.back() * 3 + 1) % static_cast<int32_t>(kSmall.vocab));
  }
  for (Trainer* t : {&kept, &cast}) {
    ASSERT_TRUE(t->SetInput("tokens", tokens).ok());
    ASSERT_TRUE(t->SetInput("targets", targets).ok());
    ASSERT_TRUE(t->Step().ok());
  }
  ASSERT_EQ(*kept.Loss(), *cast.Loss()) << when;
}

TEST(ParameterCopiesGpuTest, Gpt2Bf16TrainsAsWithACastEachStepThroughHostWrites) {
  REPRISE_REQUIRE_GPU();
  auto gpt = models::BuildGpt2(kSmall);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto kept = Trainer::Create(gpt->graph, gpt->loss, Bf16AdamW(true));
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto cast = Trainer::Create(gpt->graph, gpt->loss, Bf16AdamW(false));
  ASSERT_TRUE(cast.ok()) << cast.status();
  // The kept copies are state of their own class; the other trainer casts at every step.
  EXPECT_EQ((*kept)->stats().parameter_copy_bytes,
            (*kept)->stats().parameter_bytes / 2 - LayerNormParameterBytes(kSmall) / 2);
  EXPECT_EQ((*cast)->stats().parameter_copy_bytes, 0);
  std::mt19937 rng(7);
  testing::ScopedTempDir dir;
  const std::string weights = dir.path() + "/weights.safetensors";
  const std::string checkpoint = dir.path() + "/step.ckpt";
  for (int step = 0; step < 3; ++step) StepBoth(**kept, **cast, rng, absl::StrCat("step ", step));
  ASSERT_TRUE((*cast)->SaveWeights(weights).ok());
  ASSERT_TRUE((*cast)->SaveCheckpoint(checkpoint).ok());

  // A weight written by the host: without a refresh the next step would read its old copy.
  const std::string fc = "transformer.h.1.mlp.c_fc.weight";
  std::vector<float> halved = *(*cast)->GetParameter(fc);
  for (float& w : halved) w *= 0.5f;
  for (Trainer* t : {kept->get(), cast->get()}) ASSERT_TRUE(t->SetParameter(fc, halved).ok());
  StepBoth(**kept, **cast, rng, "after SetParameter");
  StepBoth(**kept, **cast, rng, "a step later");

  for (Trainer* t : {kept->get(), cast->get()}) ASSERT_TRUE(t->LoadWeights(weights).ok());
  StepBoth(**kept, **cast, rng, "after LoadWeights");

  for (Trainer* t : {kept->get(), cast->get()}) ASSERT_TRUE(t->RestoreCheckpoint(checkpoint).ok());
  StepBoth(**kept, **cast, rng, "after RestoreCheckpoint");
  StepBoth(**kept, **cast, rng, "a step later");
  EXPECT_EQ(testing::ParameterValues(**kept), testing::ParameterValues(**cast));
}

TEST(ParameterCopiesGpuTest, CapturedStepReplaysTheEagerStepWithTheCopies) {
  REPRISE_REQUIRE_GPU();
  auto gpt = models::BuildGpt2(kSmall);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto kept = Trainer::Create(gpt->graph, gpt->loss, Bf16AdamW(true));
  ASSERT_TRUE(kept.ok()) << kept.status();
  std::vector<int32_t> tokens(kSmall.batch * kSmall.seq);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 13) % 512);
  ASSERT_TRUE((*kept)->SetInput("tokens", tokens).ok());
  ASSERT_TRUE((*kept)->SetInput("targets", tokens).ok());
  ASSERT_TRUE((*kept)->Step().ok());
  // Once after a host write (the flag set: the refresh runs), once with the copies current.
  const std::string fc = "transformer.h.0.attn.c_proj.weight";
  ASSERT_TRUE((*kept)->SetParameter(fc, *(*kept)->GetParameter(fc)).ok());
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<VerifyResult> verified = (*kept)->Verify(3);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_TRUE(verified->ok()) << verified->ToString();
    ASSERT_TRUE((*kept)->Step().ok());
  }
}

// The kernels alone, over 600 tensors of odd sizes (two launches of 512 and 88; tails element by
// element): adam_multi writing the first 550 tensors' copies (bfloat16 and float16 in turn) and
// refresh_copies before it, with the flag set and clear, plain, loss-scaled and skipped: the CPU
// reference's bits for every weight, moment, copy and the flag.
TEST(ParameterCopiesGpuTest, UpdateAndRefreshKernelsGiveTheCpuBits) {
  REPRISE_REQUIRE_GPU();
  for (const char* mode : {"plain", "scaled", "skipped"}) {
    for (int stale : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(mode, ", stale ", stale));
      const bool scaled = std::string(mode) != "plain";
      auto step = testing::BuildSixteenBitGradientStep(600, /*widening_casts=*/false, scaled,
                                                       /*copies=*/550);
      ASSERT_TRUE(step.ok()) << step.status();
      ir::ReferenceExecutor cpu(step->graph, false, 5);
      ASSERT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{7, 0}).ok());
      ASSERT_TRUE(cpu.SetLeaf("stale", std::vector<int32_t>{stale}).ok());
      if (scaled) {
        const double found = std::string(mode) == "skipped" ? 1 : 0;
        ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, found}).ok());
      }
      ExpectGpuMatchesCpu(step->graph, cpu, /*tolerance=*/0);
    }
  }
}

}  // namespace
}  // namespace reprise
