// GPT-2's evaluation and decode step on the GPU (Trainer::CompileForward, models::Gpt2Generator):
// the evaluation loss equals the trainer's Loss() before a step; decoding token by token gives
// the full forward's logits at every position (float32 and bfloat16); the captured decode step
// gives the eager one's bits; greedy generation picks the full forward's argmax; decode_attention
// and add_position_at match their CPU references; nothing leaks.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/gpt2_decode.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/decode_attention.h"
#include "src/runtime/device.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::models {
namespace {

using ::testing::HasSubstr;

Gpt2Config Small() {
  return {.batch = 2,
          .seq = 16,
          .max_positions = 16,
          .vocab = 96,
          .layers = 2,
          .heads = 2,
          .width = 64};
}

std::vector<int32_t> Tokens(const Gpt2Config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(c.batch * c.seq);
  for (int32_t& v : t) v = static_cast<int32_t>(rng() % c.vocab);
  return t;
}

std::unique_ptr<Trainer> MakeTrainer(const Gpt2& model, DType compute) {
  TrainOptions options;
  options.seed = 11;
  options.numerics.compute_dtype = compute;
  options.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdamW, .learning_rate = 1e-3f};
  auto trainer = Trainer::Create(model.graph, model.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Targets are the tokens shifted by one (the last repeats): any fixed ids in range will do.
std::vector<int32_t> Targets(const std::vector<int32_t>& tokens) {
  std::vector<int32_t> t(tokens.begin() + 1, tokens.end());
  t.push_back(tokens.back());
  return t;
}

TEST(Gpt2DecodeGpuTest, EvalLossEqualsTheTrainersLossBeforeAStep) {
  REPRISE_REQUIRE_GPU();
  for (DType compute : {DType::kFloat32, DType::kBFloat16}) {
    auto model = BuildGpt2(Small());
    ASSERT_TRUE(model.ok()) << model.status();
    auto trainer = MakeTrainer(*model, compute);
    ASSERT_TRUE(trainer);
    auto eval = BuildGpt2(Small());
    ASSERT_TRUE(eval.ok());
    REPRISE_ASSERT_OK_AND_ASSIGN(auto runner, trainer->CompileForward(eval->graph, {eval->loss}));
    for (int step = 0; step < 2; ++step) {
      const std::vector<int32_t> tokens = Tokens(Small(), step);
      REPRISE_ASSERT_OK(runner->SetInput("tokens", tokens));
      REPRISE_ASSERT_OK(runner->SetInput("targets", Targets(tokens)));
      REPRISE_ASSERT_OK(runner->Run());
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> eval_loss, runner->Read(eval->loss));
      REPRISE_ASSERT_OK(trainer->SetInput("tokens", tokens));
      REPRISE_ASSERT_OK(trainer->SetInput("targets", Targets(tokens)));
      REPRISE_ASSERT_OK(trainer->Step());
      REPRISE_ASSERT_OK_AND_ASSIGN(const float loss, trainer->Loss());
      EXPECT_NEAR(eval_loss[0], loss, (compute == DType::kFloat32 ? 1e-5 : 1e-3) * loss)
          << DTypeName(compute) << " step " << step;
    }
  }
}

// The decode step's logits at each position against one forward of the whole sequences.
void ExpectDecodeMatchesFullForward(DType compute, ExecMode mode, double tolerance) {
  const Gpt2Config config = Small();
  auto model = BuildGpt2(config);
  ASSERT_TRUE(model.ok()) << model.status();
  auto trainer = MakeTrainer(*model, compute);
  ASSERT_TRUE(trainer);
  const std::vector<int32_t> tokens = Tokens(config, 3);
  // A step first, so that the weights are the trainer's updated ones, not the initial ones.
  REPRISE_ASSERT_OK(trainer->SetInput("tokens", Tokens(config, 4)));
  REPRISE_ASSERT_OK(trainer->SetInput("targets", Targets(Tokens(config, 4))));
  REPRISE_ASSERT_OK(trainer->Step());
  auto eval = BuildGpt2(config);
  ASSERT_TRUE(eval.ok());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto full, trainer->CompileForward(eval->graph, {eval->logits}));
  REPRISE_ASSERT_OK(full->SetInput("tokens", tokens));
  REPRISE_ASSERT_OK(full->SetInput("targets", tokens));
  REPRISE_ASSERT_OK(full->Run());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> expected, full->Read(eval->logits));
  const int64_t width = models::Gpt2LogitsWidth(config);  // The full model's padded logits.
  REPRISE_ASSERT_OK_AND_ASSIGN(auto generator,
                               Gpt2Generator::Create(*trainer, config, {.mode = mode}));
  ForwardRunner& decode = generator->runner();
  double error = 0, norm = 0;
  for (int repeat = 0; repeat < 2; ++repeat) {  // ResetState starts a new sequence.
    REPRISE_ASSERT_OK(decode.ResetState());
    for (int64_t t = 0; t < config.seq; ++t) {
      std::vector<int32_t> column;
      for (int64_t b = 0; b < config.batch; ++b) column.push_back(tokens[b * config.seq + t]);
      REPRISE_ASSERT_OK(decode.SetInput("tokens", column));
      REPRISE_ASSERT_OK(decode.Run());
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> logits,
                                   decode.Read(generator->decoder().logits));
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> next,
                                   decode.ReadInt32(generator->decoder().position));
      EXPECT_EQ(next, std::vector<int32_t>{static_cast<int32_t>(t + 1)});
      for (int64_t b = 0; b < config.batch; ++b) {
        for (int64_t v = 0; v < config.vocab; ++v) {
          const double want = expected[(b * config.seq + t) * width + v];
          const double got = logits[b * config.vocab + v];
          error += (got - want) * (got - want);
          norm += want * want;
          ASSERT_FALSE(std::isnan(got)) << "position " << t;
        }
      }
    }
  }
  EXPECT_LT(std::sqrt(error / norm), tolerance) << DTypeName(compute);
  const ForwardStats stats = decode.stats();
  EXPECT_EQ(stats.runs, 2 * config.seq);
  EXPECT_EQ(stats.graph_replays, mode == ExecMode::kGraph ? 2 * config.seq : 0);
  // Two layers' k and v caches [2, 16, 64] and the counter.
  const int64_t element = compute == DType::kFloat32 ? 4 : 2;
  EXPECT_EQ(stats.state_bytes, 4 * 2 * 16 * 64 * element + 4);
}

TEST(Gpt2DecodeGpuTest, DecodingTokenByTokenEqualsTheFullForwardFloat32) {
  REPRISE_REQUIRE_GPU();
  ExpectDecodeMatchesFullForward(DType::kFloat32, ExecMode::kGraph, 1e-5);
}

TEST(Gpt2DecodeGpuTest, DecodingTokenByTokenEqualsTheFullForwardBFloat16) {
  REPRISE_REQUIRE_GPU();
  ExpectDecodeMatchesFullForward(DType::kBFloat16, ExecMode::kGraph, 2e-2);
}

TEST(Gpt2DecodeGpuTest, EagerDecodingEqualsTheFullForward) {
  REPRISE_REQUIRE_GPU();
  ExpectDecodeMatchesFullForward(DType::kFloat32, ExecMode::kBulked, 1e-5);
}

// The captured decode step replays the eager launches: the same bits, token after token.
TEST(Gpt2DecodeGpuTest, CapturedDecodeEqualsEagerDecodeBitForBit) {
  REPRISE_REQUIRE_GPU();
  const Gpt2Config config = Small();
  auto model = BuildGpt2(config);
  ASSERT_TRUE(model.ok());
  auto trainer = MakeTrainer(*model, DType::kBFloat16);
  ASSERT_TRUE(trainer);
  REPRISE_ASSERT_OK_AND_ASSIGN(auto graph, Gpt2Generator::Create(*trainer, config));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      auto eager, Gpt2Generator::Create(*trainer, config, {.mode = ExecMode::kBulked}));
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4}};
  const SampleOptions sampling{.temperature = 0.9f, .top_k = 20, .seed = 5};
  REPRISE_ASSERT_OK_AND_ASSIGN(auto a, graph->Generate(prompts, 10, sampling));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto b, eager->Generate(prompts, 10, sampling));
  EXPECT_EQ(a, b);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> la,
                               graph->runner().Read(graph->decoder().logits));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> lb,
                               eager->runner().Read(eager->decoder().logits));
  EXPECT_EQ(la, lb);
  EXPECT_EQ(graph->runner().stats().graph_captures, 1);
  EXPECT_GT(graph->runner().stats().graph_replays, 0);
}

// Greedy generation continues each prompt with the full forward's argmax at every position.
TEST(Gpt2DecodeGpuTest, GreedyGenerationFollowsTheFullForwardsArgmax) {
  REPRISE_REQUIRE_GPU();
  Gpt2Config config = Small();
  auto model = BuildGpt2(config);
  ASSERT_TRUE(model.ok());
  auto trainer = MakeTrainer(*model, DType::kFloat32);
  ASSERT_TRUE(trainer);
  REPRISE_ASSERT_OK_AND_ASSIGN(auto generator, Gpt2Generator::Create(*trainer, config));
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7, 8}, {9, 10, 11, 12}};
  const int new_tokens = static_cast<int>(config.seq) - 4;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto generated,
                               generator->Generate(prompts, new_tokens, {.temperature = 0}));
  std::vector<int32_t> tokens;
  for (int b = 0; b < 2; ++b) {
    ASSERT_EQ(generated[b].size(), static_cast<size_t>(new_tokens));
    tokens.insert(tokens.end(), prompts[b].begin(), prompts[b].end());
    tokens.insert(tokens.end(), generated[b].begin(), generated[b].end());
  }
  auto eval = BuildGpt2(config);
  ASSERT_TRUE(eval.ok());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto full, trainer->CompileForward(eval->graph, {eval->logits}));
  REPRISE_ASSERT_OK(full->SetInput("tokens", tokens));
  REPRISE_ASSERT_OK(full->SetInput("targets", tokens));
  REPRISE_ASSERT_OK(full->Run());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> logits, full->Read(eval->logits));
  for (int b = 0; b < 2; ++b) {
    for (int t = 3; t < config.seq - 1; ++t) {
      // The full model's rows are padded past the vocabulary; the decoder's are not.
      const float* row = logits.data() + (b * config.seq + t) * models::Gpt2LogitsWidth(config);
      REPRISE_ASSERT_OK_AND_ASSIGN(
          const int32_t argmax,
          SampleToken(absl::MakeConstSpan(row, config.vocab), {.temperature = 0}, 0));
      EXPECT_EQ(tokens[b * config.seq + t + 1], argmax) << "sequence " << b << " position " << t;
    }
  }
  // Past the cache: refused before anything runs.
  const absl::Status too_long = generator->Generate(prompts, new_tokens + 2, {}).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument) << too_long;
  EXPECT_THAT(too_long.message(), HasSubstr("the cache holds 16"));
  EXPECT_THAT(
      generator->Generate({{1}, {static_cast<int32_t>(config.vocab)}}, 1, {}).status().message(),
      HasSubstr("outside [0, 96)"));
}

// A float32 cache under a bfloat16 trainer would be written in a 16-bit copy: refused by name.
TEST(Gpt2DecodeGpuTest, ACacheOfAnotherDtypeThanTheComputeIsRefused) {
  REPRISE_REQUIRE_GPU();
  auto model = BuildGpt2(Small());
  ASSERT_TRUE(model.ok());
  auto trainer = MakeTrainer(*model, DType::kBFloat16);
  ASSERT_TRUE(trainer);
  auto decoder = BuildGpt2Decoder(Small(), DType::kFloat32);
  ASSERT_TRUE(decoder.ok());
  const absl::Status status = trainer->CompileForward(decoder->graph, {decoder->logits}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("transformer.h.0.attn.k_cache"));
}

TEST(Gpt2DecodeGpuTest, GeneratorsLeakNoDeviceMemory) {
  REPRISE_REQUIRE_GPU();
  auto model = BuildGpt2(Small());
  ASSERT_TRUE(model.ok());
  auto trainer = MakeTrainer(*model, DType::kBFloat16);
  ASSERT_TRUE(trainer);
  auto generate = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto generator = Gpt2Generator::Create(*trainer, Small());
      ASSERT_TRUE(generator.ok()) << generator.status();
      ASSERT_TRUE((*generator)->Generate({{1, 2}, {3}}, 4, {.seed = 1}).ok());
    }
  };
  generate(2);
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t before, runtime::DeviceMemoryInUse());
  generate(3);
  REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t after, runtime::DeviceMemoryInUse());
  EXPECT_EQ(after, before);
}

// The ops alone against their CPU references, each launch on its own (float32 and bfloat16).
TEST(DecodeOpsGpuTest, MatchTheCpuReference) {
  REPRISE_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Graph g;
    const TensorSpec cache{Shape{3, 7, 8}, dtype};
    const Initializer uniform = Initializer::Uniform(-1, 1);
    REPRISE_ASSERT_OK_AND_ASSIGN(Value qkv, g.AddInput("qkv", {Shape{3, 24}, dtype}, uniform));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value k, g.AddState("k", cache, uniform));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value v, g.AddState("v", cache, uniform));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value position, g.AddState("position", {Shape{1}, DType::kInt32},
                                                            Initializer::Constant(4)));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value y, g.AddOp1(ops::DecodeAttentionOp(), "attn",
                                                   {qkv, k, v, position}, {{"heads", int64_t{2}}}));
    // Parameters are float32: a 16-bit table is a constant here (mixed precision casts one).
    REPRISE_ASSERT_OK_AND_ASSIGN(Value table, g.AddConstant("wpe", {Shape{7, 8}, dtype}, uniform));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value at,
                                 g.AddOp1(ops::AddPositionAtOp(), "wpe_at", {y, table, position}));
    REPRISE_ASSERT_OK_AND_ASSIGN(Value next,
                                 g.AddOp1(ops::AdvancePositionOp(), "advance", {position}));
    REPRISE_ASSERT_OK(g.AddControlEdge(at.node, next.node));
    REPRISE_ASSERT_OK(g.AddControlEdge(y.node, next.node));
    ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
    ExpectGpuMatchesCpu(g, cpu, dtype == DType::kFloat32 ? 1e-6 : 1e-2);
  }
}

}  // namespace
}  // namespace reprise::models
