// Inputs that the fuzzers (tests/fuzz) found to crash or to reach undefined behaviour, each kept
// as the smallest graph or call that did. They pass in any build; the sanitizer build
// (docs/testing.md) is what sees the undefined behaviour they used to reach.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/nn_attention.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/decode_attention.h"
#include "src/ops/mlp_step.h"
#include "src/ops/ops.h"
#include "src/passes/mirror.h"
#include "src/passes/plan.h"
#include "src/passes/schedule.h"
#include "src/util/safetensors.h"

namespace reprise {
namespace {

constexpr int64_t kHugeCounts[] = {std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min(), int64_t{1} << 62,
                                   (int64_t{1} << 62) + 1};

// A multi-tensor update's "tensors" attribute was multiplied by the inputs per tensor before it
// was bounded: a huge count overflowed int64.
TEST(FuzzRegressionTest, MultiTensorUpdatesRefuseHugeTensorCounts) {
  for (const ir::OpDef* op : {&ops::AdamMultiOp(), &ops::SgdMomentumMultiOp()}) {
    Graph g;
    std::vector<Value> inputs;
    for (int i = 0; i < 12; ++i) {
      auto v = g.AddParameter(absl::StrCat("p", i), {Shape{4}}, Initializer::Zeros());
      ASSERT_TRUE(v.ok()) << v.status();
      inputs.push_back(*v);
    }
    const std::string before = g.ToString();
    for (int64_t tensors : kHugeCounts) {
      auto added = g.AddOp(*op, "update", inputs, {{"tensors", tensors}});
      EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument)
          << op->name << " tensors=" << tensors;
      EXPECT_EQ(g.ToString(), before);
    }
  }
}

// SumLosses of one loss returned it unchecked: a value of no graph (Value{}) came back OK, and a
// caller reading its spec read out of bounds.
TEST(FuzzRegressionTest, SumLossesChecksASingleLoss) {
  Graph g;
  auto x = g.AddInput("x", {Shape{4}, DType::kFloat32});
  auto labels = g.AddInput("labels", {Shape{4}, DType::kInt32});
  auto scalar = g.AddParameter("w", {Shape{}}, Initializer::Zeros());
  ASSERT_TRUE(x.ok() && labels.ok() && scalar.ok());
  const std::string before = g.ToString();
  for (const Value& bad : {Value{}, Value{99, 0}, Value{scalar->node, 1}, *x, *labels}) {
    auto sum = models::SumLosses(g, {bad});
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument) << bad.node;
    EXPECT_EQ(models::SumLosses(g, {*scalar, bad}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(g.ToString(), before);
  }
  auto one = models::SumLosses(g, {*scalar});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, *scalar);
}

// LayerNorm, Embedding and PositionEmbedding add their parameters before their op: an op that was
// refused left the parameters in the graph, so a retry failed on their names.
TEST(FuzzRegressionTest, TransformerLayersLeaveTheGraphAsItWasWhenRefused) {
  Graph g;
  auto x = g.AddInput("x", {Shape{2, 3, 4}, DType::kFloat32});
  auto ids = g.AddInput("ids", {Shape{6}, DType::kInt32});
  ASSERT_TRUE(x.ok() && ids.ok());
  const std::string before = g.ToString();
  // Float ids; positions outside [1, max_positions]; a NaN epsilon.
  EXPECT_FALSE(nn::Embedding(g, *x, 10, 4, "wte").ok());
  EXPECT_EQ(g.ToString(), before);
  EXPECT_FALSE(nn::PositionEmbedding(g, *x, 8, 0, "wpe").ok());
  EXPECT_EQ(g.ToString(), before);
  EXPECT_FALSE(nn::LayerNorm(g, *x, "ln", std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_EQ(g.ToString(), before);
  // The same names then build.
  EXPECT_TRUE(nn::Embedding(g, *ids, 10, 4, "wte").ok());
  EXPECT_TRUE(nn::PositionEmbedding(g, *x, 8, 3, "wpe").ok());
  EXPECT_TRUE(nn::LayerNorm(g, *x, "ln").ok());
}

// A huge MLP depth or GPT-2 layer count with tiny widths passed every size check and the builder
// looped adding layers until memory ran out; no graph can hold them (int32 node ids).
TEST(FuzzRegressionTest, ModelsRefuseMoreLayersThanAGraphHolds) {
  for (int64_t depth : {int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    Graph g;
    auto mlp = models::AddMlp(
        g, {.batch = 1, .input_features = 1, .depth = depth, .width = 1, .classes = 2});
    EXPECT_EQ(mlp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(g.num_nodes(), 0);
    auto gpt = models::BuildGpt2({.batch = 1,
                                  .seq = 1,
                                  .max_positions = 1,
                                  .vocab = 2,
                                  .layers = depth,
                                  .heads = 1,
                                  .width = 1});
    EXPECT_EQ(gpt.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// A packed causal attention tripled its heads before comparing them with the width: a huge
// head count overflowed int64.
TEST(FuzzRegressionTest, AttentionRefusesHugeHeadCounts) {
  Graph g;
  auto qkv = g.AddInput("qkv", {Shape{2, 3, 12}, DType::kFloat32});
  ASSERT_TRUE(qkv.ok());
  for (int64_t heads : kHugeCounts) {
    EXPECT_EQ(nn::CausalAttention(g, *qkv, heads, "attn").status().code(),
              absl::StatusCode::kInvalidArgument)
        << heads;
    EXPECT_EQ(nn::CausalAttention(g, *qkv, *qkv, *qkv, heads, "attn").status().code(),
              absl::StatusCode::kInvalidArgument)
        << heads;
  }
  EXPECT_TRUE(nn::CausalAttention(g, *qkv, 2, "attn").ok());
  // The decoder's attention, the same rule.
  auto rows = g.AddInput("rows", {Shape{2, 12}, DType::kFloat32});
  auto cache = g.AddState("cache", {Shape{2, 2, 4, 4}}, Initializer::Zeros());
  auto position = g.AddState("position", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  ASSERT_TRUE(rows.ok() && cache.ok() && position.ok());
  for (int64_t heads : kHugeCounts) {
    EXPECT_FALSE(g.AddOp(ops::DecodeAttentionOp(), "decode", {*rows, *cache, *cache, *position},
                         {{"heads", heads}})
                     .ok());
  }
}

// Conv2d's initializer bound took the fan-in (channels per group x kernel^2) in int64: 2^32
// channels and a 2^31 kernel wrapped before AddParameter's size check could refuse the weight.
TEST(FuzzRegressionTest, ConvolutionFanInPastInt64IsRefusedNotWrapped) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{1, int64_t{1} << 32, 1, 1}});
  const int before = g.num_nodes();
  auto y = nn::Conv2d(g, x, 4, "wide", {.kernel = int64_t{1} << 31});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("wide"), std::string::npos) << y.status();
  EXPECT_EQ(g.num_nodes(), before);
}

// The mirror floor summed the bytes of the activations the backward pass reads: each fit in
// int64, two of 2^62 bytes did not, and the sum wrapped instead of the graph being refused.
TEST(FuzzRegressionTest, ActivationBytesPastInt64AreRefusedByTheMirrorFloorAndThePlan) {
  Graph g;
  constexpr int64_t kWide = int64_t{1} << 30;  // [2^30, 2^30] f32: 2^62 bytes each.
  Value h = *g.AddInput("x", {Shape{kWide, 2}, DType::kFloat32});
  const Value labels = *g.AddInput("labels", {Shape{kWide}, DType::kInt32});
  h = *nn::Linear(g, h, kWide, "fc0", /*bias=*/false);
  h = *nn::Linear(g, h, kWide, "fc1", /*bias=*/false);
  h = *nn::Linear(g, h, 2, "fc2", /*bias=*/false);
  const Value loss = *nn::SoftmaxCrossEntropy(g, h, labels, "loss");
  auto training = autodiff::BuildTrainingGraph(g, loss, {.learning_rate = 0.05f});
  ASSERT_TRUE(training.ok()) << training.status();
  const auto floor = passes::MirrorFloorBytes(*training, {training->loss});
  EXPECT_EQ(floor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(floor.status().message().find("int64"), std::string::npos) << floor.status();
  const auto plan = passes::BuildPlan(*std::move(training), {}, passes::PlanOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

// The schedule's critical path summed each node's estimated cost in int64: a chain of 2^62-byte
// activations wrapped on the third node. The path's length now saturates.
TEST(FuzzRegressionTest, ScheduleCriticalPathOfHugeActivationsSaturates) {
  Graph g;
  constexpr int64_t kWide = int64_t{1} << 30;  // [2^30, 2^30] f32: 2^62 bytes each.
  Value h = *g.AddInput("x", {Shape{kWide, kWide}, DType::kFloat32});
  for (int i = 0; i < 4; ++i) h = *nn::Relu(g, h, absl::StrCat("relu", i));
  auto order = passes::Schedule(g, {.lanes = 3});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(order->size(), 4u);
}

// A float64 reference widens a bfloat16 gradient to float32 but promotes the float32 norm
// partials to float64: the norm read the float32 values as doubles, past their end, and the
// non-finite flags were written as floats into float64 storage. Each tensor is now read and
// written in its own type.
TEST(FuzzRegressionTest, NormAndFlagsOfASixteenBitGradientInAFloat64Reference) {
  Graph g;
  const Value grad = *g.AddInput("grad", {Shape{6}, DType::kBFloat16}, Initializer::Constant(2));
  const Value loss = *g.AddInput("loss", {Shape{}, DType::kFloat32}, Initializer::Constant(1));
  const std::vector<Value> out = *g.AddOp(ops::GradSumSquaresNonfiniteOp(), "norm", {grad, loss});
  for (bool float64 : {false, true}) {
    ir::ReferenceExecutor cpu(g, float64, 1);
    ASSERT_TRUE(cpu.Run().ok());
    const ir::HostTensor& partials = **cpu.Tensor(out[0]);
    const ir::HostTensor& flags = **cpu.Tensor(out[1]);
    ASSERT_EQ(partials.dtype(), float64 ? DType::kFloat64 : DType::kFloat32);
    EXPECT_EQ(ir::FloatElement(partials, 0), 24.0);
    ASSERT_EQ(flags.spec().NumElements(), 2);  // The gradient's chunk, the loss.
    EXPECT_EQ(ir::FloatElement(flags, 0), 0.0);
    EXPECT_EQ(ir::FloatElement(flags, 1), 0.0);
  }
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 1);
  ASSERT_TRUE(cpu.SetLeaf("loss", std::vector<double>{std::nan("")}).ok());
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_EQ(ir::FloatElement(**cpu.Tensor(out[1]), 1), 1.0);
}

// The whole-step MLP op narrowed its "layers" attribute to int before bounding it: 2^31 layers
// became -2^31 and the arity check's 4 * layers overflowed.
TEST(FuzzRegressionTest, WholeStepMlpRefusesALayerCountPastItsInputs) {
  Graph g;
  std::vector<Value> inputs;
  for (int i = 0; i < 12; ++i) {
    inputs.push_back(*g.AddInput(absl::StrCat("in", i), {Shape{2}}, Initializer::Zeros()));
  }
  for (int64_t layers : {int64_t{1} << 31, int64_t{1} << 40, int64_t{4}, int64_t{0}}) {
    auto added = g.AddOp(ops::MlpTrainStepOp(), "step", inputs, {{"layers", layers}});
    EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument) << layers;
  }
}

// The safetensors reader took a tensor named "" that the writer then refused to write again (the
// fuzzer's round trip); both refuse it now.
TEST(FuzzRegressionTest, SafetensorsRefusesAnUnnamedTensor) {
  const std::string header = R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header;
  bytes += std::string(4, '\0');
  const auto file = util::ParseSafetensors(bytes, "unnamed.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find("empty name"), std::string::npos) << file.status();
  EXPECT_NE(file.status().message().find("unnamed.safetensors"), std::string::npos)
      << file.status();
}

}  // namespace
}  // namespace reprise
