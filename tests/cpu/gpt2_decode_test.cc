// models::BuildGpt2Decoder on the CPU reference: the same parameter names as models::BuildGpt2,
// and decoding a sequence token by token gives, at every position, the logits of BuildGpt2's one
// forward over the whole sequence (float64). Bad configs and the sampler's choices and errors.
#include "reprise/gpt2_decode.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/ir/reference_executor.h"

namespace reprise::models {
namespace {

using ::testing::HasSubstr;

Gpt2Config SmallConfig() {
  return {
      .batch = 2, .seq = 6, .max_positions = 8, .vocab = 11, .layers = 2, .heads = 2, .width = 8};
}

std::set<std::string> ParameterNames(const Graph& g) {
  std::set<std::string> names;
  for (int32_t id : g.NodesOf("parameter")) names.insert(g.node(id).name);
  return names;
}

TEST(Gpt2DecoderTest, HasBuildGpt2sParametersAndOneTokenPerSequence) {
  auto full = BuildGpt2(SmallConfig());
  ASSERT_TRUE(full.ok()) << full.status();
  auto decoder = BuildGpt2Decoder(SmallConfig());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  EXPECT_EQ(ParameterNames(decoder->graph), ParameterNames(full->graph));
  for (const std::string& name : ParameterNames(full->graph)) {
    const Graph& f = full->graph;
    const Graph& d = decoder->graph;
    EXPECT_EQ(d.node(*d.FindNode(name)).outputs[0], f.node(*f.FindNode(name)).outputs[0]) << name;
  }
  EXPECT_EQ(decoder->graph.spec(decoder->tokens).ToString(), "i32[2]");
  EXPECT_EQ(decoder->graph.spec(decoder->logits).ToString(), "f32[2, 11]");
  EXPECT_EQ(decoder->graph.spec(decoder->position).ToString(), "i32[1]");
  auto cache = decoder->graph.FindNode("transformer.h.1.attn.v_cache");
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(decoder->graph.node(*cache).outputs[0].ToString(), "f32[2, 8, 8]");
  auto bf16 = BuildGpt2Decoder(SmallConfig(), DType::kBFloat16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  cache = bf16->graph.FindNode("transformer.h.0.attn.k_cache");
  EXPECT_EQ(bf16->graph.node(*cache).outputs[0].ToString(), "bf16[2, 8, 8]");
}

TEST(Gpt2DecoderTest, TokenByTokenEqualsTheFullForwardAtEveryPosition) {
  const Gpt2Config config = SmallConfig();
  auto full = BuildGpt2(config);
  ASSERT_TRUE(full.ok()) << full.status();
  auto decoder = BuildGpt2Decoder(config);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<int32_t> tokens(config.batch * config.seq);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 11);
  ir::ReferenceExecutor whole(full->graph, /*float64=*/true, 5);
  ASSERT_TRUE(whole.SetLeaf("tokens", tokens).ok());
  ASSERT_TRUE(whole.SetLeaf("targets", tokens).ok());
  ASSERT_TRUE(whole.Run().ok());
  // Another seed, then the full model's weights copied in by name.
  ir::ReferenceExecutor step(decoder->graph, /*float64=*/true, 9);
  for (const std::string& name : ParameterNames(decoder->graph)) {
    ir::HostTensor* source = *whole.Leaf(name);
    absl::Span<const double> data = source->data<double>();
    ASSERT_TRUE(step.SetLeaf(name, std::vector<double>(data.begin(), data.end())).ok()) << name;
  }
  absl::Span<const double> expected = (*whole.Tensor(full->logits))->data<double>();
  // The full model's logits are padded to 128 columns; the decoder's are not.
  const int64_t width = Gpt2LogitsWidth(config);
  ASSERT_EQ(width, 128);
  for (int64_t t = 0; t < config.seq; ++t) {
    std::vector<int32_t> column;
    for (int64_t b = 0; b < config.batch; ++b) column.push_back(tokens[b * config.seq + t]);
    ASSERT_TRUE(step.SetLeaf("tokens", column).ok());
    const absl::Status ran = step.Run();
    ASSERT_TRUE(ran.ok()) << ran;
    EXPECT_EQ((*step.Tensor(decoder->position))->data<int32_t>()[0], t + 1);
    absl::Span<const double> logits = (*step.Tensor(decoder->logits))->data<double>();
    for (int64_t b = 0; b < config.batch; ++b) {
      for (int64_t v = 0; v < config.vocab; ++v) {
        EXPECT_NEAR(logits[b * config.vocab + v], expected[(b * config.seq + t) * width + v], 1e-10)
            << "sequence " << b << " position " << t << " token " << v;
      }
    }
  }
}

TEST(Gpt2DecoderTest, BadConfigsAreRefused) {
  Gpt2Config bad = SmallConfig();
  bad.heads = 3;
  EXPECT_THAT(BuildGpt2Decoder(bad).status().message(), HasSubstr("heads"));
  bad = SmallConfig();
  bad.max_positions = 0;
  EXPECT_THAT(BuildGpt2Decoder(bad).status().message(), HasSubstr("max_positions"));
  const absl::Status int_cache = BuildGpt2Decoder(SmallConfig(), DType::kInt32).status();
  EXPECT_EQ(int_cache.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(int_cache.message(), HasSubstr("cache_dtype"));
}

TEST(SampleTokenTest, GreedyTopKAndTemperature) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, std::log(3.0f) + 0.5f, -1.0f};
  // Greedy: the first largest logit, whatever the draw.
  EXPECT_EQ(*SampleToken(logits, {.temperature = 0}, 0.99), 1);
  EXPECT_EQ(*SampleToken(logits, {.temperature = 1, .top_k = 1}, 0.99), 1);
  // Top 2 of {0.5, log 3 + 0.5}... here the two 2.0s: equal weights, the draw splits them.
  EXPECT_EQ(*SampleToken(logits, {.temperature = 1, .top_k = 2}, 0.25), 1);
  EXPECT_EQ(*SampleToken(logits, {.temperature = 1, .top_k = 2}, 0.75), 2);
  // Among {0.5, log 3 + 0.5} only: weights 3 : 1, largest first.
  const std::vector<float> two = {0.5f, std::log(3.0f) + 0.5f};
  EXPECT_EQ(*SampleToken(two, {.temperature = 1}, 0.70), 1);
  EXPECT_EQ(*SampleToken(two, {.temperature = 1}, 0.80), 0);
  // A high temperature flattens them to about 1 : 1.
  EXPECT_EQ(*SampleToken(two, {.temperature = 1000}, 0.49), 1);
  EXPECT_EQ(*SampleToken(two, {.temperature = 1000}, 0.51), 0);
}

TEST(SampleTokenTest, BadInputsAreRefused) {
  const std::vector<float> logits = {1, 2};
  EXPECT_EQ(SampleToken({}, {}, 0.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(SampleToken(logits, {.temperature = -1}, 0.5).status().message(),
              HasSubstr("temperature"));
  EXPECT_THAT(SampleToken(logits, {.temperature = NAN}, 0.5).status().message(),
              HasSubstr("temperature"));
  EXPECT_THAT(SampleToken(logits, {.top_k = -2}, 0.5).status().message(), HasSubstr("top_k"));
  const std::vector<float> nan = {1, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THAT(SampleToken(nan, {}, 0.5).status().message(), HasSubstr("logit 1 is NaN"));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> inf = {1, kInf};
  EXPECT_THAT(SampleToken(inf, {}, 0.5).status().message(), HasSubstr("logit 1 is +inf"));
  const std::vector<float> masked = {-kInf, -kInf};
  EXPECT_THAT(SampleToken(masked, {}, 0.5).status().message(),
              HasSubstr("every one of the 2 logits is -inf"));
  for (double draw : {-0.1, 1.0, static_cast<double>(NAN)}) {
    EXPECT_THAT(SampleToken(logits, {}, draw).status().message(), HasSubstr("[0, 1)")) << draw;
  }
}

// A logit of -inf is a masked token: never drawn, whatever the draw or the temperature.
TEST(SampleTokenTest, MaskedTokensAreNeverDrawn) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.0f};
  for (double draw : {0.0, 0.3, 0.7, 0.999999}) {
    for (float temperature : {0.0f, 1e-30f, 1.0f, 1e30f}) {
      auto token = SampleToken(logits, {.temperature = temperature}, draw);
      ASSERT_TRUE(token.ok()) << token.status();
      EXPECT_TRUE(*token == 1 || *token == 3) << *token << " at " << draw << ", T " << temperature;
    }
  }
}

}  // namespace
}  // namespace reprise::models
