// models::BuildGpt2 trained by the Trainer on the GPU: a small GPT-2 (2 layers, 128 wide, 4
// heads, vocabulary 512, 64 tokens, batch 4) in float32 against the CPU reference of the same
// AdamW step with clipping and a schedule; in bfloat16 its loss falls on a learnable pattern and a
// captured step replays the eager one bit for bit, as GPT-2 124M's does over 50 steps; weights go
// out and back in by name; token ids outside the vocabulary are refused. With a vocabulary of 500
// (the logits padded to 512 columns) the float32 and bfloat16 steps match the CPU reference too,
// and the forward logits are the reference's with exactly zero padding columns. The output layer
// in row slices (KernelTuning::head_loss_chunks) matches the reference and replays bitwise.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/cpu/json_reader.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/small_gpt2.h"

namespace reprise {
namespace {

using models::Gpt2Config;
using ::testing::HasSubstr;

Gpt2Config Small() { return testing::kSmallGpt2; }

// nanoGPT's: AdamW with betas 0.9 / 0.95, decay on the 2-D weights only, clipping at 1.0, a
// linear warm-up and a cosine decay.
OptimizerOptions NanoGptAdamW(float learning_rate) {
  return {
      .kind = OptimizerKind::kAdamW,
      .learning_rate = learning_rate,
      .beta1 = 0.9f,
      .beta2 = 0.95f,
      .weight_decay = 0.1f,
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      .schedule = {
          .warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 200, .min_lr_factor = 0.1f}};
}

// Batch `step`: random tokens (fixed seeds), each target a fixed function of its token, so that
// the model can learn it from the current token alone.
struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch MakeBatch(const Gpt2Config& c, int step) {
  std::mt19937 rng(1000 + step);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab) - 1);
  Batch b;
  for (int64_t i = 0; i < c.batch * c.seq; ++i) {
    b.tokens.push_back(token(rng));
    b.targets.push_back(static_cast<int32_t>((b.tokens.back() * 3 + 1) % c.vocab));
  }
  return b;
}

absl::Status Feed(Trainer& t, const Batch& b) {
  RETURN_IF_ERROR(t.SetInput("tokens", b.tokens));
  return t.SetInput("targets", b.targets);
}

double RelativeL2(absl::Span<const float> a, absl::Span<const float> b) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// Small() with a vocabulary of 500: the logits padded to 512 columns.
Gpt2Config SmallPadded() {
  Gpt2Config c = Small();
  c.vocab = 500;
  return c;
}

// Five steps in float32 (no TF32) as captured replays against the CPU reference of the same
// training graph from the same initial weights: the losses agree to 1e-4 and the parameters to
// 1e-4 (relative L2 per tensor). `head_loss_chunks` as KernelTuning's.
void ExpectFloat32StepsMatchTheCpuReference(const Gpt2Config& c, int head_loss_chunks = 0) {
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  TrainOptions options;
  options.seed = 42;
  options.optimizer = NanoGptAdamW(1e-3f);
  options.kernels.head_loss_chunks = head_loss_chunks;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto gpu, Trainer::Create(gpt.graph, gpt.loss, options));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      autodiff::TrainingGraph training,
      autodiff::BuildTrainingGraphWith(gpt.graph, gpt.loss, options.optimizer));
  ir::ReferenceExecutor cpu(training.graph, /*float64=*/false, /*seed=*/42);
  for (int s = 0; s < 5; ++s) {
    const Batch b = MakeBatch(c, s);
    REPRISE_ASSERT_OK(Feed(*gpu, b));
    REPRISE_ASSERT_OK(gpu->Step());
    REPRISE_ASSERT_OK(cpu.SetLeaf("tokens", b.tokens));
    REPRISE_ASSERT_OK(cpu.SetLeaf("targets", b.targets));
    REPRISE_ASSERT_OK(cpu.Run());
    const float cpu_loss = (*cpu.Tensor(training.loss))->data<float>()[0];
    REPRISE_ASSERT_OK_AND_ASSIGN(const float gpu_loss, gpu->Loss());
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-4 * std::abs(cpu_loss)) << "step " << s;
    if (s == 0) EXPECT_NEAR(cpu_loss, std::log(static_cast<double>(c.vocab)), 0.1);
  }
  for (const std::string& name : gpu->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> p, gpu->GetParameter(name));
    absl::Span<const float> g(p), r = (*cpu.Leaf(name))->data<float>();
    ASSERT_EQ(g.size(), r.size()) << name;
    if (absl::EndsWith(name, "attn.c_attn.bias")) {
      // The key bias adds q·b to every score of a row, which the softmax cancels: its gradient is
      // zero but for rounding, which Adam's normalised step turns into a full step of either
      // sign. Only the query and value biases are compared.
      const size_t C = static_cast<size_t>(c.width);
      EXPECT_LT(RelativeL2(g.subspan(0, C), r.subspan(0, C)), 1e-4) << name << " (q)";
      EXPECT_LT(RelativeL2(g.subspan(2 * C), r.subspan(2 * C)), 1e-4) << name << " (v)";
      continue;
    }
    EXPECT_LT(RelativeL2(g, r), 1e-4) << name;
  }
}

TEST(Gpt2ModelGpuTest, Float32StepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  ExpectFloat32StepsMatchTheCpuReference(Small());
}

TEST(Gpt2ModelGpuTest, PaddedVocabFloat32StepsMatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  ASSERT_EQ(models::Gpt2LogitsWidth(SmallPadded()), 512);
  ExpectFloat32StepsMatchTheCpuReference(SmallPadded());
}

// The forward logits (ForwardRunner on the trainer's initial weights) against the CPU reference:
// the vocabulary's 500 columns within 1e-4 (float32) or 2e-2 (bfloat16) relative L2, the 12
// padding columns exactly 0, and the loss as the reference's.
// The output layer in three row slices, their loss passes on a second stream
// (KernelTuning::head_loss_chunks), against the same CPU reference.
TEST(Gpt2ModelGpuTest, PaddedVocabFloat32HeadInSlicesMatchesTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  ExpectFloat32StepsMatchTheCpuReference(SmallPadded(), /*head_loss_chunks=*/3);
}

TEST(Gpt2ModelGpuTest, PaddedVocabLogitsMatchTheCpuReferenceWithZeroPadding) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = SmallPadded();
  const int64_t vocab = c.vocab, width = models::Gpt2LogitsWidth(c), rows = c.batch * c.seq;
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  const Batch b = MakeBatch(c, 0);
  ir::ReferenceExecutor cpu(gpt.graph, /*float64=*/false, /*seed=*/42);
  REPRISE_ASSERT_OK(cpu.SetLeaf("tokens", b.tokens));
  REPRISE_ASSERT_OK(cpu.SetLeaf("targets", b.targets));
  REPRISE_ASSERT_OK(cpu.Run());
  absl::Span<const float> expected = (*cpu.Tensor(gpt.logits))->data<float>();
  const float expected_loss = (*cpu.Tensor(gpt.loss))->data<float>()[0];
  ASSERT_EQ(expected.size(), static_cast<size_t>(rows * width));
  for (DType compute : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(compute));
    TrainOptions options;
    options.seed = 42;
    options.numerics.compute_dtype = compute;
    options.optimizer = NanoGptAdamW(1e-3f);
    REPRISE_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(gpt.graph, gpt.loss, options));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto forward,
                                 trainer->CompileForward(gpt.graph, {gpt.logits, gpt.loss}));
    REPRISE_ASSERT_OK(forward->SetInput("tokens", b.tokens));
    REPRISE_ASSERT_OK(forward->SetInput("targets", b.targets));
    REPRISE_ASSERT_OK(forward->Run());
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> logits, forward->Read(gpt.logits));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> loss, forward->Read(gpt.loss));
    ASSERT_EQ(logits.size(), expected.size());
    std::vector<float> got_real, expected_real;
    int nonzero_padding = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < width; ++col) {
        const float v = logits[r * width + col];
        if (col >= vocab) {
          nonzero_padding += v != 0.0f;
          continue;
        }
        got_real.push_back(v);
        expected_real.push_back(expected[r * width + col]);
      }
    }
    const double tolerance = compute == DType::kFloat32 ? 1e-4 : 2e-2;
    EXPECT_EQ(nonzero_padding, 0);
    EXPECT_LT(RelativeL2(got_real, expected_real), tolerance);
    EXPECT_NEAR(loss[0], expected_loss, tolerance * std::abs(expected_loss));
  }
}

std::unique_ptr<Trainer> BFloat16Trainer(const models::Gpt2& gpt, float learning_rate,
                                         bool deterministic, uint64_t seed = 42,
                                         MirrorOptions mirror = {}, int head_loss_chunks = 0) {
  TrainOptions options;
  options.mirror = mirror;
  options.kernels.head_loss_chunks = head_loss_chunks;
  options.seed = seed;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.numerics.deterministic = deterministic;
  options.optimizer = NanoGptAdamW(learning_rate);
  // These steps hold 64 nodes or more, which kAuto launches from the device; racecheck does not
  // support device-side launches (gpu_test_util.h), so under it they launch from the host.
  if (testing::UnderRacecheck()) options.launch.graph_launch = GraphLaunch::kHost;
  auto trainer = Trainer::Create(gpt.graph, gpt.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// bfloat16 against the float32 CPU reference for the first steps (within 2e-2), then the loss
// falls from ln(512) = 6.24 to under 0.5.
TEST(Gpt2ModelGpuTest, BFloat16LossFallsOnALearnablePattern) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = Small();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  std::unique_ptr<Trainer> gpu = BFloat16Trainer(gpt, 3e-3f, /*deterministic=*/false);
  ASSERT_TRUE(gpu);
  REPRISE_ASSERT_OK_AND_ASSIGN(
      autodiff::TrainingGraph training,
      autodiff::BuildTrainingGraphWith(gpt.graph, gpt.loss, NanoGptAdamW(3e-3f)));
  ir::ReferenceExecutor cpu(training.graph, /*float64=*/false, /*seed=*/42);
  std::vector<float> losses;
  for (int s = 0; s < 150; ++s) {
    const Batch b = MakeBatch(c, s);
    REPRISE_ASSERT_OK(Feed(*gpu, b));
    REPRISE_ASSERT_OK(gpu->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, gpu->Loss());
    ASSERT_TRUE(std::isfinite(loss)) << "step " << s;
    losses.push_back(loss);
    if (s >= 3) continue;
    REPRISE_ASSERT_OK(cpu.SetLeaf("tokens", b.tokens));
    REPRISE_ASSERT_OK(cpu.SetLeaf("targets", b.targets));
    REPRISE_ASSERT_OK(cpu.Run());
    const float cpu_loss = (*cpu.Tensor(training.loss))->data<float>()[0];
    EXPECT_NEAR(loss, cpu_loss, 2e-2 * std::abs(cpu_loss)) << "step " << s;
  }
  // The float32 CPU reference of these steps reaches 0.95 at step 40 and 0.006 at step 149.
  EXPECT_LT(losses.back(), 0.5f) << ::testing::PrintToString(losses);
}

// A captured step replays the eager step's bits: every loss, gradient, parameter and AdamW moment
// over 20 steps.
TEST(Gpt2ModelGpuTest, BFloat16CapturedStepsAgreeWithEagerBitForBit) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(Small()));
  std::unique_ptr<Trainer> trainer = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true);
  ASSERT_TRUE(trainer);
  REPRISE_ASSERT_OK(Feed(*trainer, MakeBatch(Small(), 0)));
  REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, trainer->Verify(20));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 20);
}

// bfloat16 with the padded vocabulary: the first steps within 2e-2 of the float32 CPU reference,
// then a captured step replays the eager one bit for bit.
TEST(Gpt2ModelGpuTest, PaddedVocabBFloat16MatchesTheCpuReferenceAndReplaysEager) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = SmallPadded();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  std::unique_ptr<Trainer> gpu = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true);
  ASSERT_TRUE(gpu);
  REPRISE_ASSERT_OK_AND_ASSIGN(
      autodiff::TrainingGraph training,
      autodiff::BuildTrainingGraphWith(gpt.graph, gpt.loss, NanoGptAdamW(1e-3f)));
  ir::ReferenceExecutor cpu(training.graph, /*float64=*/false, /*seed=*/42);
  for (int s = 0; s < 3; ++s) {
    const Batch b = MakeBatch(c, s);
    REPRISE_ASSERT_OK(Feed(*gpu, b));
    REPRISE_ASSERT_OK(gpu->Step());
    REPRISE_ASSERT_OK(cpu.SetLeaf("tokens", b.tokens));
    REPRISE_ASSERT_OK(cpu.SetLeaf("targets", b.targets));
    REPRISE_ASSERT_OK(cpu.Run());
    const float cpu_loss = (*cpu.Tensor(training.loss))->data<float>()[0];
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, gpu->Loss());
    EXPECT_NEAR(loss, cpu_loss, 2e-2 * std::abs(cpu_loss)) << "step " << s;
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, gpu->Verify(5));
  EXPECT_TRUE(result.ok()) << result.ToString();
}

// The bar: GPT-2 124M in bfloat16, replay = eager bit for bit over 50 steps (B=4, T=256
// to keep it short).
TEST(Gpt2ModelGpuTest, Gpt2SmallVerify50InBFloat16) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = {.batch = 4, .seq = 256};
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  ASSERT_EQ(gpt.graph.NumParameterElements(), 124'439'808);
  std::unique_ptr<Trainer> trainer = BFloat16Trainer(gpt, 6e-4f, /*deterministic=*/true);
  ASSERT_TRUE(trainer);
  REPRISE_ASSERT_OK(Feed(*trainer, MakeBatch(c, 0)));
  REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, trainer->Loss());
  EXPECT_NEAR(loss, std::log(50257.0), 0.3);
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, trainer->Verify(50));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 50);
}

// SaveWeights writes nanoGPT's names (no lm_head.weight: it is wte); another trainer loads them
// by name and then holds the same bits and takes the same step. The torch-compatible file holds
// exactly nanoGPT's parameters.
TEST(Gpt2ModelGpuTest, SaveAndLoadWeightsRoundTripByName) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = Small();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  std::unique_ptr<Trainer> a = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true, 1);
  std::unique_ptr<Trainer> b = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true, 2);
  ASSERT_TRUE(a && b);
  for (int s = 0; s < 3; ++s) {
    REPRISE_ASSERT_OK(Feed(*a, MakeBatch(c, s)));
    REPRISE_ASSERT_OK(a->Step());
  }
  testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/gpt2.safetensors";
  const std::string torch_path = dir.path() + "/gpt2_torch.safetensors";
  REPRISE_ASSERT_OK(a->SaveWeights(path));
  REPRISE_ASSERT_OK(a->SaveWeights(torch_path, {.torch_compatible = true}));
  REPRISE_ASSERT_OK(b->LoadWeights(path, {.allow_missing = false, .allow_unexpected = false}));
  for (const std::string& name : a->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> pa, a->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> pb, b->GetParameter(name));
    ASSERT_EQ(pa.size(), pb.size()) << name;
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0) << name;
  }
  const Batch next = MakeBatch(c, 3);
  for (Trainer* t : {a.get(), b.get()}) {
    REPRISE_ASSERT_OK(Feed(*t, next));
    REPRISE_ASSERT_OK(t->Step());
  }
  EXPECT_EQ(*a->Loss(), *b->Loss());

  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile full, util::ReadSafetensors(path));
  std::vector<std::string> names;
  for (const auto& e : full.entries) names.push_back(e.name);
  EXPECT_THAT(names, ::testing::Contains("transformer.wte.weight"));
  EXPECT_THAT(names, ::testing::Contains("transformer.h.1.mlp.c_proj.weight.exp_avg_sq"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("lm_head.weight")));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile torch,
                               util::ReadSafetensors(torch_path));
  std::vector<std::string> torch_names, parameters = a->ParameterNames();
  for (const auto& e : torch.entries) torch_names.push_back(e.name);
  EXPECT_THAT(torch_names, ::testing::UnorderedElementsAreArray(parameters));
  EXPECT_EQ(parameters.size(), 4u + 12u * 2u);
}

// Layer norm and GELU outputs recomputed in the backward pass (TrainOptions::mirror auto): a
// lower activation peak, replay = eager bit for bit, and losses that follow the unmirrored run's
// (a recomputed GELU reads the rounded bfloat16 product where a fused chain may not: not bitwise).
TEST(Gpt2ModelGpuTest, MirroredStepsReplayBitwiseAndFollowTheUnmirroredLosses) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = Small();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  std::unique_ptr<Trainer> plain = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true);
  std::unique_ptr<Trainer> mirrored = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true, 42,
                                                      {.policy = MirrorOptions::Policy::kAuto});
  ASSERT_TRUE(plain && mirrored);
  const TrainerStats stats = mirrored->stats();
  EXPECT_GT(stats.mirrored_nodes, 0);
  EXPECT_LT(stats.activation_peak_bytes, stats.activation_peak_unmirrored_bytes);
  for (int s = 0; s < 10; ++s) {
    const Batch b = MakeBatch(c, s);
    for (Trainer* t : {plain.get(), mirrored.get()}) {
      REPRISE_ASSERT_OK(Feed(*t, b));
      REPRISE_ASSERT_OK(t->Step());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float expected, plain->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, mirrored->Loss());
    EXPECT_NEAR(loss, expected, 1e-2 * std::abs(expected)) << "step " << s;
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, mirrored->Verify(5));
  EXPECT_TRUE(result.ok()) << result.ToString();
}

// The output layer in row slices in bfloat16: the step's graph holds each slice's product, loss
// pass and data gradient (more nodes than the unsliced step), the losses follow the unsliced
// run's (a slice's product may round apart from the whole one's), and a captured step replays the
// eager one bit for bit.
TEST(Gpt2ModelGpuTest, HeadInSlicesFollowsTheUnslicedLossesAndReplaysBitwise) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = SmallPadded();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  constexpr int kSlices = 3;
  std::unique_ptr<Trainer> plain = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true);
  std::unique_ptr<Trainer> sliced =
      BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/true, 42, {}, kSlices);
  ASSERT_TRUE(plain && sliced);
  for (int s = 0; s < 10; ++s) {
    const Batch b = MakeBatch(c, s);
    for (Trainer* t : {plain.get(), sliced.get()}) {
      REPRISE_ASSERT_OK(Feed(*t, b));
      REPRISE_ASSERT_OK(t->Step());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const float expected, plain->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, sliced->Loss());
    EXPECT_NEAR(loss, expected, 1e-2 * std::abs(expected)) << "step " << s;
  }
  EXPECT_GT(sliced->stats().graph_nodes, plain->stats().graph_nodes);
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, sliced->Verify(5));
  EXPECT_TRUE(result.ok()) << result.ToString();
}

TEST(Gpt2ModelGpuTest, TokenIdsOutsideTheVocabularyAreRefusedNamingTheInput) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config c = Small();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 gpt, models::BuildGpt2(c));
  std::unique_ptr<Trainer> t = BFloat16Trainer(gpt, 1e-3f, /*deterministic=*/false);
  ASSERT_TRUE(t);
  Batch b = MakeBatch(c, 0);
  b.tokens[77] = 512;
  absl::Status s = t->SetInput("tokens", b.tokens);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("input 'tokens'"), HasSubstr("outside [0, 512)")));
  b.targets[5] = -1;
  s = t->SetInput("targets", b.targets);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("input 'targets'"), HasSubstr("'loss'")));
  // With the vocabulary padded, a target in the padding is refused as well.
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 padded, models::BuildGpt2(SmallPadded()));
  std::unique_ptr<Trainer> p = BFloat16Trainer(padded, 1e-3f, /*deterministic=*/false);
  ASSERT_TRUE(p);
  Batch pb = MakeBatch(SmallPadded(), 0);
  pb.targets[9] = 505;
  s = p->SetInput("targets", pb.targets);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("input 'targets'"), HasSubstr("outside [0, 500)")));
}

// reprise-bench --model gpt2 (built beside this test) on a small GPT-2: its JSON rows carry
// tokens/s, the model TFLOPS and MFU, consistent with the step time.
TEST(Gpt2BenchGpuTest, JsonCarriesTokensPerSecondAndMfu) {
  REPRISE_REQUIRE_GPU();
  const std::filesystem::path bench =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "reprise-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "reprise-bench is not beside this test";
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("reprise_gpt2_bench_" + std::to_string(getpid()) + ".json"))
                                    .string();
  const std::string command = bench.string() +
                              " --model gpt2 --batch 4 --seq 64 --layers 2 --heads 4 --width 128"
                              " --vocab 512 --iters 20 --warmup 5 --mode graph --fusion on"
                              " --peak_tflops 100 --json " +
                              json_path + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(json_path);
  auto json = testing::ParseJson(text.str());
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << text.str();
  EXPECT_EQ((*json)["config"]["model"].string, "gpt2");
  EXPECT_EQ((*json)["config"]["seq"].integer, 64);
  // The graph row is "graph", or "graph+devlaunch" where the device launches the step.
  const testing::JsonValue& results = (*json)["results"];
  const testing::JsonValue& r = results["graph"].type == testing::JsonValue::Type::kObject
                                    ? results["graph"]
                                    : results["graph+devlaunch"];
  ASSERT_EQ(r.type, testing::JsonValue::Type::kObject) << text.str();
  const double ms = r["median_ms"].number;
  ASSERT_GT(ms, 0);
  EXPECT_NEAR(r["tokens_per_s"].number, 4 * 64 / (ms / 1000), 1e-3 * 4 * 64 / (ms / 1000));
  EXPECT_GT(r["model_tflops"].number, 0);
  EXPECT_NEAR(r["mfu"].number, r["model_tflops"].number / 100, 1e-4);
}

}  // namespace
}  // namespace reprise
