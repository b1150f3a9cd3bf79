// conv2d_dgrad_accumulate: a residual block's input gradient (conv2d_dgrad + add) as one cuDNN call
// that adds into its third input in place. The fuse pass finds it in ResNets, the memory plan
// gives the sum the overwritten value's place (and refuses a value still read afterwards), and the
// CPU reference computes the unfused ops' bits. conv2d_dgrad_add, the same sum written apart (for
// cuDNN's graph API), likewise.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/api/compile_options.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/memory_plan.h"
#include "src/passes/pipeline.h"
#include "src/passes/schedule.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

int Count(const Graph& g, absl::string_view op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

class ConvDgradAccumulateTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ConvDgradAccumulateTest, EveryResidualBlockInputGradientAccumulatesInPlace) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  // Each of the 8 basic blocks sums its input's gradient from conv1's data gradient and the skip.
  EXPECT_EQ(Count(t.graph, "add"), 8 + 8);  // The forward's residual adds and the backward's sums.
  auto off = passes::Fuse(t, {t.loss}, {.conv_dgrad_accumulate = false});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(Count(off->training.graph, "conv2d_dgrad_accumulate"), 0);
  EXPECT_EQ(Count(off->training.graph, "add"), 8);

  auto fused = passes::Fuse(t, {t.loss}, {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  EXPECT_EQ(Count(g, "conv2d_dgrad_accumulate"), 8);
  EXPECT_EQ(Count(g, "add"), 0);

  for (int lanes : {1, 2}) {
    auto schedule = passes::Schedule(g, {.lanes = lanes});
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    auto memory = passes::PlanMemory(g, absl::MakeSpan(*schedule), {fused->training.loss});
    ASSERT_TRUE(memory.ok()) << memory.status();
    int shared = 0;
    for (const Node& node : g.nodes()) {
      if (node.op != &ops::Conv2dDgradAccumulateOp()) continue;
      const passes::Buffer* out = memory->Find({node.id, 0});
      const passes::Buffer* acc = memory->Find(node.inputs[2]);
      EXPECT_EQ(out->offset, acc->offset) << node.name;
      EXPECT_EQ(out->overwrites, memory->index.at(node.inputs[2])) << node.name;
      ++shared;
    }
    EXPECT_EQ(shared, 8);
  }
}

// For cuDNN's graph API the same sums are written apart from their summands (conv2d_dgrad_add):
// each has memory of its own, and the summand keeps its value.
TEST_P(ConvDgradAccumulateTest, ForTheGraphApiEverySumIsWrittenApart) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, {.conv_dgrad_add_apart = true});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  EXPECT_EQ(Count(g, "conv2d_dgrad_add"), 8);
  EXPECT_EQ(Count(g, "conv2d_dgrad_accumulate"), 0);
  EXPECT_EQ(Count(g, "add"), 0);
  auto schedule = passes::Schedule(g, {.lanes = 2});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto memory = passes::PlanMemory(g, absl::MakeSpan(*schedule), {fused->training.loss});
  ASSERT_TRUE(memory.ok()) << memory.status();
  int apart = 0;
  for (const Node& node : g.nodes()) {
    if (node.op != &ops::Conv2dDgradAddOp()) continue;
    const passes::Buffer* out = memory->Find({node.id, 0});
    const passes::Buffer* acc = memory->Find(node.inputs[2]);
    EXPECT_EQ(out->overwrites, -1) << node.name;
    EXPECT_TRUE(out->offset + out->bytes <= acc->offset || acc->offset + acc->bytes <= out->offset)
        << node.name << ": the sum's memory overlaps its summand's";
    ++apart;
  }
  EXPECT_EQ(apart, 8);
}

// TrainOptions choose: in place by default and with the legacy API; apart only where asked with
// the graph API; in the batch-norm gradients that read them where asked
// (residual_sums_in_batch_norm), leaving the one the stem's pooling gradient reads to a
// convolution, apart with the graph API; with residual_sums_min_elements, the smaller sums and
// the pooling's in place. (Block inputs of 8192, 4096, 2048 and 1024 elements, two of each.)
TEST(ConvDgradSumsOptionTest, TrainOptionsChooseInPlaceOrApart) {
  auto net = models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 4, .image_size = 32, .layout = Layout::kNHWC});
  ASSERT_TRUE(net.ok()) << net.status();
  struct Want {
    KernelTuning::ConvApi api;
    bool in_place;
    bool in_batch_norm;
    const char* op;
    int convolutions;  // Sums by the convolution `op`; the rest by batch-norm gradients.
    int64_t min_elements = 0;
  };
  for (const Want& w :
       {Want{KernelTuning::ConvApi::kGraph, true, false, "conv2d_dgrad_accumulate", 8},
        Want{KernelTuning::ConvApi::kGraph, false, false, "conv2d_dgrad_add", 8},
        Want{KernelTuning::ConvApi::kLegacy, false, false, "conv2d_dgrad_accumulate", 8},
        Want{KernelTuning::ConvApi::kGraph, true, true, "conv2d_dgrad_add", 1},
        Want{KernelTuning::ConvApi::kLegacy, true, true, "conv2d_dgrad_accumulate", 1},
        // Above a size, the smaller sums and the pooling's stay in place, graph API or not.
        Want{KernelTuning::ConvApi::kGraph, true, true, "conv2d_dgrad_accumulate", 6,
             2 * 8 * 8 * 64},
        Want{KernelTuning::ConvApi::kGraph, true, true, "conv2d_dgrad_accumulate", 8, 1 << 30}}) {
    TrainOptions options;
    options.kernels.conv_api = w.api;
    options.kernels.conv_sums_in_place = w.in_place;
    options.kernels.residual_sums_in_batch_norm = w.in_batch_norm;
    options.kernels.residual_sums_min_elements = w.min_elements;
    auto step = passes::CompileStep(net->graph, net->loss,
                                    CompileOptionsFor(options, codegen::MlpStepTarget{}));
    ASSERT_TRUE(step.ok()) << step.status();
    const Graph& g = step->plan.graph();
    EXPECT_EQ(Count(g, w.op), w.convolutions) << w.op;
    EXPECT_EQ(Count(g, "conv2d_dgrad_add") + Count(g, "conv2d_dgrad_accumulate"), w.convolutions);
    int in_batch_norm = 0;
    for (const Node& n : g.nodes()) in_batch_norm += ir::BoolAttrOr(n.attrs, "dy_addend", false);
    EXPECT_EQ(in_batch_norm, 8 - w.convolutions) << w.op;
  }
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ConvDgradAccumulateTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(LayoutName(info.param));
                         });

// dy [2, 4, 5, 5] and w [4, 3, 3, 3] give dx [2, 3, 5, 5] (NCHW, stride 1, pad 1).
Attrs DgradAttrs() {
  return {{"stride_h", 1},   {"stride_w", 1},   {"pad_h", 1},  {"pad_w", 1},
          {"dilation_h", 1}, {"dilation_w", 1}, {"groups", 1}, {"layout", std::string("NCHW")},
          {"input_h", 5},    {"input_w", 5}};
}

struct SmallGraph {
  Graph g;
  Value dy, w, p, acc;  // acc = relu(p): a transient value.
};

SmallGraph Operands() {
  SmallGraph s;
  const Initializer random = Initializer::Uniform(-1, 1);
  s.dy = *s.g.AddParameter("dy", {Shape{2, 4, 5, 5}}, random);
  s.w = *s.g.AddParameter("w", {Shape{4, 3, 3, 3}}, random);
  s.p = *s.g.AddParameter("p", {Shape{2, 3, 5, 5}}, random);
  s.acc = *s.g.AddOp1(ops::ReluOp(), "acc", {s.p});
  return s;
}

TEST(ConvDgradAccumulateOpTest, CpuReferenceGivesTheBitsOfDgradThenAdd) {
  SmallGraph s = Operands();
  auto dx = s.g.AddOp1(ops::Conv2dDgradOp(), "dgrad", {s.dy, s.w}, DgradAttrs());
  ASSERT_TRUE(dx.ok()) << dx.status();
  auto sum = s.g.AddOp1(ops::AddOp(), "sum", {*dx, s.acc});
  auto fused =
      s.g.AddOp1(ops::Conv2dDgradAccumulateOp(), "fused", {s.dy, s.w, s.acc}, DgradAttrs());
  ASSERT_TRUE(sum.ok() && fused.ok()) << fused.status();
  ir::ReferenceExecutor cpu(s.g, false, 5);
  ASSERT_TRUE(cpu.Run().ok());
  const auto want = (*cpu.Tensor(*sum))->data<float>(), got = (*cpu.Tensor(*fused))->data<float>();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << i;
}

TEST(ConvDgradAccumulateOpTest, SumWrittenApartGivesTheBitsOfDgradThenAdd) {
  SmallGraph s = Operands();
  auto dx = s.g.AddOp1(ops::Conv2dDgradOp(), "dgrad", {s.dy, s.w}, DgradAttrs());
  ASSERT_TRUE(dx.ok()) << dx.status();
  auto sum = s.g.AddOp1(ops::AddOp(), "sum", {*dx, s.acc});
  // A parameter may be the summand: nothing is written over it.
  auto fused = s.g.AddOp1(ops::Conv2dDgradAddOp(), "fused", {s.dy, s.w, s.acc}, DgradAttrs());
  auto over_p = s.g.AddOp1(ops::Conv2dDgradAddOp(), "over_p", {s.dy, s.w, s.p}, DgradAttrs());
  ASSERT_TRUE(sum.ok() && fused.ok() && over_p.ok()) << fused.status() << over_p.status();
  ir::ReferenceExecutor cpu(s.g, false, 5);
  ASSERT_TRUE(cpu.Run().ok());
  const auto want = (*cpu.Tensor(*sum))->data<float>(), got = (*cpu.Tensor(*fused))->data<float>();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << i;
  // Both sums and their summands kept: the memory plan gives each its own place.
  auto schedule = passes::Schedule(s.g);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto memory = passes::PlanMemory(s.g, absl::MakeSpan(*schedule), {s.acc, *fused, *over_p, *sum});
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_NE(memory->Find(*fused)->offset, memory->Find(s.acc)->offset);
}

TEST(ConvDgradAccumulateOpTest, AnAccumulatorOfAnotherShapeIsRefused) {
  SmallGraph s = Operands();
  Value other = *s.g.AddParameter("other", {Shape{2, 3, 4, 5}}, Initializer::Uniform(-1, 1));
  for (const ir::OpDef* op : {&ops::Conv2dDgradAccumulateOp(), &ops::Conv2dDgradAddOp()}) {
    auto fused = s.g.AddOp1(*op, "fused", {s.dy, s.w, other}, DgradAttrs());
    ASSERT_FALSE(fused.ok()) << op->name;
    EXPECT_THAT(fused.status().message(), HasSubstr("acc is f32[2, 3, 4, 5]"));
  }
}

TEST(ConvDgradAccumulateOpTest, TheMemoryPlanRefusesToWriteOverAValueReadLater) {
  SmallGraph s = Operands();
  auto fused =
      s.g.AddOp1(ops::Conv2dDgradAccumulateOp(), "fused", {s.dy, s.w, s.acc}, DgradAttrs());
  ASSERT_TRUE(fused.ok()) << fused.status();
  // Reads acc after the accumulation has written over it.
  auto late = s.g.AddOp1(ops::AddOp(), "late", {*fused, s.acc});
  ASSERT_TRUE(late.ok()) << late.status();
  auto schedule = passes::Schedule(s.g);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto memory = passes::PlanMemory(s.g, absl::MakeSpan(*schedule), {*late});
  ASSERT_FALSE(memory.ok());
  EXPECT_THAT(memory.status().message(), HasSubstr("node 'fused' writes over 'acc'"));

  // A parameter, or a value kept after the step, cannot be written over at all.
  for (bool over_parameter : {true, false}) {
    SmallGraph t = Operands();
    auto over = t.g.AddOp1(ops::Conv2dDgradAccumulateOp(), "fused",
                           {t.dy, t.w, over_parameter ? t.p : t.acc}, DgradAttrs());
    ASSERT_TRUE(over.ok()) << over.status();
    auto order = passes::Schedule(t.g);
    ASSERT_TRUE(order.ok()) << order.status();
    auto refused = passes::PlanMemory(t.g, absl::MakeSpan(*order), {t.acc, *over});
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(refused.status().message(), HasSubstr("only a transient value"));
  }
}

}  // namespace
}  // namespace reprise
