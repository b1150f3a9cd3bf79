// BuildForwardPlan and CheckForwardParameters (src/api/forward_plan.h), the host half of
// Trainer::CompileForward: a forward-only plan (no gradient, no optimizer, parameters first in
// the arena, the outputs kept), token ids and labels ranged, a float32 cache refused under
// mixed precision, and parameters checked by name, shape and dtype.
#include "src/api/forward_plan.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/gpt2_decode.h"
#include "reprise/models.h"
#include "src/ir/op_def.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

models::Gpt2Config Small() {
  return {
      .batch = 2, .seq = 8, .max_positions = 8, .vocab = 50, .layers = 2, .heads = 2, .width = 16};
}

// The trainer's side of the check: the parameters of `graph` by name.
auto SpecsOf(const Graph& graph) {
  std::map<std::string, TensorSpec> specs;
  for (int32_t id : graph.NodesOf("parameter")) {
    specs[graph.node(id).name] = graph.node(id).outputs[0];
  }
  return [specs](const std::string& name) -> absl::StatusOr<TensorSpec> {
    auto it = specs.find(name);
    if (it == specs.end()) return absl::NotFoundError(name);
    return it->second;
  };
}

TEST(ForwardPlanTest, ADecoderPlanIsForwardOnlyWithItsParametersFirst) {
  for (DType compute : {DType::kFloat32, DType::kBFloat16}) {
    auto decoder = models::BuildGpt2Decoder(Small(), compute);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    TrainOptions train;
    train.numerics.compute_dtype = compute;
    auto planned = BuildForwardPlan(decoder->graph, {decoder->logits, decoder->position}, train, {},
                                    /*fuse=*/true);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const passes::Plan& plan = planned->plan;
    int64_t parameter_bytes = 0;
    for (const Node& n : plan.graph().nodes()) {
      EXPECT_NE(n.op->kind, ir::OpKind::kOptimizer) << n.name;
      EXPECT_THAT(n.op_name(), ::testing::Not(HasSubstr("_grad"))) << n.name;
    }
    for (const passes::Buffer& b : plan.memory.buffers) {
      if (b.cls == passes::BufferClass::kParameter) {
        parameter_bytes += b.bytes;
        EXPECT_LT(b.offset, planned->parameter_region);
      } else {
        EXPECT_GE(b.offset, planned->parameter_region);
      }
    }
    EXPECT_GE(planned->parameter_region, parameter_bytes);
    EXPECT_EQ(plan.lanes(), 1);
    ASSERT_EQ(planned->outputs.size(), 2u);
    const Value logits = planned->outputs.at(decoder->logits);
    EXPECT_EQ(plan.graph().spec(logits).ToString(), "f32[2, 50]") << DTypeName(compute);
    EXPECT_EQ(plan.memory.Find(logits)->cls, passes::BufferClass::kFetched);
    ASSERT_TRUE(planned->limits.contains("tokens"));
    EXPECT_EQ(planned->limits.at("tokens").range.classes, 50);
    EXPECT_EQ(planned->limits.at("tokens").consumer, "transformer.wte");
    // The trainer of BuildGpt2 has every parameter the decoder reads.
    auto model = models::BuildGpt2(Small());
    ASSERT_TRUE(model.ok());
    EXPECT_TRUE(CheckForwardParameters(plan, SpecsOf(model->graph)).ok());
  }
}

TEST(ForwardPlanTest, AnEvaluationPlanRangesTokensAndTargets) {
  auto model = models::BuildGpt2(Small());
  ASSERT_TRUE(model.ok());
  auto planned = BuildForwardPlan(model->graph, {model->loss}, TrainOptions{}, {}, true);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->limits.at("targets").range.classes, 50);
  EXPECT_EQ(planned->limits.at("targets").consumer, "loss");
  EXPECT_EQ(planned->plan.graph().spec(planned->outputs.at(model->loss)).ToString(), "f32[]");
}

TEST(ForwardPlanTest, BadOutputsAndAFloat32CacheUnderBFloat16AreRefused) {
  auto decoder = models::BuildGpt2Decoder(Small(), DType::kFloat32);
  ASSERT_TRUE(decoder.ok());
  TrainOptions bf16;
  bf16.numerics.compute_dtype = DType::kBFloat16;
  absl::Status status =
      BuildForwardPlan(decoder->graph, {decoder->logits}, bf16, {}, true).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("'transformer.h.0.attn.k_cache'"), HasSubstr("bf16")));
  status = BuildForwardPlan(decoder->graph, {}, TrainOptions{}, {}, true).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  status = BuildForwardPlan(decoder->graph, {Value{100000, 0}}, TrainOptions{}, {}, true).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(ForwardPlanTest, ParametersAreCheckedByNameShapeAndDType) {
  auto decoder = models::BuildGpt2Decoder(Small());
  ASSERT_TRUE(decoder.ok());
  auto planned = BuildForwardPlan(decoder->graph, {decoder->logits}, TrainOptions{}, {}, true);
  ASSERT_TRUE(planned.ok()) << planned.status();
  models::Gpt2Config wider = Small();
  wider.width = 32;
  auto other = models::BuildGpt2(wider);
  ASSERT_TRUE(other.ok());
  absl::Status status = CheckForwardParameters(planned->plan, SpecsOf(other->graph));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("f32[50, 16] in the graph but f32[50, 32] in "
                                                "the trainer"),
                                      HasSubstr("transformer.wte.weight")));
  auto mlp = models::BuildMlp({});
  ASSERT_TRUE(mlp.ok());
  status = CheckForwardParameters(planned->plan, SpecsOf(mlp->graph));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("is not a parameter of the trainer"));
}

}  // namespace
}  // namespace reprise
