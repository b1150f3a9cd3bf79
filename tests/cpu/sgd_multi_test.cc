// sgd_multi (TrainOptions::kernels.sgd_one_launch): its reference gives sgd_momentum's bits tensor
// by tensor (16-bit gradients, per-tensor weight decay, clip, check, Nesterov, copies), its shape
// checks, the fuse pass's one node for every checked SGD update, and ResNet-18's bfloat16 steps
// with it bit for bit as without it on the CPU reference, the parameters' copies kept.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/sgd_multi_step.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

// Every weight and velocity (and copy, where `copies`) after one step of `options`.
std::map<std::string, std::vector<float>> StepState(const testing::SgdMultiStepOptions& options,
                                                    double found) {
  auto g = testing::BuildSgdMultiStep(options);
  EXPECT_TRUE(g.ok()) << g.status();
  ir::ReferenceExecutor cpu(*g, /*float64=*/false, 5);
  if (options.checked) EXPECT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, found}).ok());
  EXPECT_TRUE(cpu.Run().ok());
  std::map<std::string, std::vector<float>> state;
  for (int t = 0; t < options.tensors; ++t) {
    for (const std::string suffix : {"", ".v"}) {
      const std::string name = "t" + std::to_string(t) + suffix;
      auto values = (*cpu.Leaf(name))->data<float>();
      state[name].assign(values.begin(), values.end());
    }
  }
  return state;
}

TEST(SgdMultiTest, OneNodeGivesSgdMomentumsBitsTensorByTensor) {
  for (bool clip : {false, true}) {
    for (bool nesterov : {false, true}) {
      for (double found : {-1.0, 0.0, 1.0}) {  // Unchecked, checked, checked and skipped.
        SCOPED_TRACE(::testing::Message()
                     << "clip " << clip << " nesterov " << nesterov << " found " << found);
        testing::SgdMultiStepOptions o{
            .tensors = 13, .clip = clip, .checked = found >= 0, .nesterov = nesterov};
        const auto one = StepState(o, found);
        o.one_node = false;
        const auto each = StepState(o, found);
        EXPECT_EQ(one, each);
        if (found == 1.0) {  // Nothing moved.
          o.checked = false;
          EXPECT_NE(StepState(o, -1), each);
        }
      }
    }
  }
}

// Each copy is its new weight rounded, the flag cleared; a skipped step writes no copy.
TEST(SgdMultiTest, TheUpdateRoundsEachNewWeightIntoItsCopyUnlessSkipped) {
  for (bool skipped : {false, true}) {
    auto g = testing::BuildSgdMultiStep({.tensors = 7, .checked = true, .copies = 5});
    ASSERT_TRUE(g.ok()) << g.status();
    ir::ReferenceExecutor cpu(*g, false, 5);
    ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{1.0, skipped ? 1.0 : 0.0}).ok());
    const std::vector<std::vector<uint16_t>> before = testing::CopyBits(cpu, 5);
    ASSERT_TRUE(cpu.Run().ok());
    testing::ExpectCopiesHoldTheRoundedWeights(cpu, 5, before, skipped);
  }
}

TEST(SgdMultiTest, ShapesAndCountsAreChecked) {
  Graph g;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  const Value w = *g.AddParameter("w", {Shape{4}}, Initializer::Zeros());
  const Value v = *g.AddState("w.v", {Shape{4}}, Initializer::Zeros());
  const Value other = *g.AddConstant("g.other", {Shape{5}}, Initializer::Zeros());
  const Value lr = *g.AddInput("lr", scalar, Initializer::Constant(0.1));
  const Value mu = *g.AddInput("mu", scalar, Initializer::Constant(0.9));
  const Value wd = *g.AddInput("wd", scalar, Initializer::Zeros());
  const Value wide = *g.AddState("wide", {Shape{4}}, Initializer::Zeros());
  const Value stale = *g.AddState("stale", {Shape{}, DType::kInt32}, Initializer::Constant(1));
  const Attrs one = {{"tensors", int64_t{1}}};
  EXPECT_TRUE(g.AddOp(ops::SgdMultiOp(), "ok", {w, w, v, wd, lr, mu}, one).ok());
  struct Case {
    std::vector<Value> inputs;
    Attrs attrs;
    std::string message;
  };
  Attrs copies = one;
  copies["copies"] = int64_t{1};
  for (const Case& c : std::vector<Case>{
           {{w, w, v, wd, lr}, one, "expected 4 inputs per tensor (w, g, v, weight_decay) for 1"},
           {{w, other, v, wd, lr, mu}, one, "tensor 0: weight f32[4], gradient f32[5]"},
           {{w, w, v, wd, lr, mu, wide, stale}, copies, "tensor 0: its copy is f32[4]"},
           {{w, w, v, wd, lr, mu}, {{"tensors", int64_t{3}}}, "for 3 tensors"}}) {
    auto added = g.AddOp(ops::SgdMultiOp(), "bad", c.inputs, c.attrs);
    ASSERT_FALSE(added.ok()) << c.message;
    EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(added.status().message(), c.message)) << added.status();
  }
}

passes::CompiledStep CompileResNet18(bool one_launch, DType dtype, NonFinitePolicy policy) {
  passes::CompileOptions options;
  options.compute_dtype = dtype;
  options.non_finite.policy = policy;
  options.plan.lanes = 2;
  options.plan.fusion.sgd_one_launch = one_launch;
  return testing::CompileSmallResNet18(options);
}

std::vector<const Node*> NodesOf(const Graph& g, absl::string_view op) {
  std::vector<const Node*> found;
  for (const Node& node : g.nodes()) {
    if (node.op_name() == op) found.push_back(&node);
  }
  return found;
}

TEST(SgdMultiTest, CheckedUpdatesOfEveryParameterAreOneNodeWithTheCopies) {
  const passes::CompiledStep on =
      CompileResNet18(true, DType::kBFloat16, NonFinitePolicy::kSkipStep);
  const Graph& g = on.plan.graph();
  const std::vector<const Node*> sgd = NodesOf(g, "sgd_multi");
  ASSERT_EQ(sgd.size(), 1u);
  EXPECT_TRUE(NodesOf(g, "sgd_momentum_multi").empty());
  EXPECT_TRUE(NodesOf(g, "sgd_momentum").empty());
  EXPECT_EQ(*ir::IntAttr(sgd[0]->attrs, "tensors"),
            static_cast<int64_t>(g.NodesOf("parameter").size()));
  // The weights' bfloat16 copies are kept and written by the update: no cast of every weight.
  EXPECT_TRUE(NodesOf(g, "cast_multi").empty());
  ASSERT_EQ(NodesOf(g, "refresh_copies").size(), 1u);
  EXPECT_GT(*ir::IntAttr(sgd[0]->attrs, "copies"), 20);  // The convolutions' and the classifier's.

  const passes::CompiledStep off =
      CompileResNet18(false, DType::kBFloat16, NonFinitePolicy::kSkipStep);
  EXPECT_TRUE(NodesOf(off.plan.graph(), "sgd_multi").empty());
  EXPECT_GE(NodesOf(off.plan.graph(), "sgd_momentum_multi").size(), 2u);
  EXPECT_EQ(NodesOf(off.plan.graph(), "cast_multi").size(), 1u);
  // Unchecked and unclipped updates may start as their gradients come: they keep their launches.
  const passes::CompiledStep unchecked =
      CompileResNet18(true, DType::kFloat32, NonFinitePolicy::kIgnore);
  EXPECT_TRUE(NodesOf(unchecked.plan.graph(), "sgd_multi").empty());
}

TEST(SgdMultiTest, ResNet18Bf16StepsHaveTheBitsOfTheLaunchesPer32Tensors) {
  const testing::ReferenceSteps on = testing::ThreeReferenceSteps(
      CompileResNet18(true, DType::kBFloat16, NonFinitePolicy::kSkipStep));
  const testing::ReferenceSteps off = testing::ThreeReferenceSteps(
      CompileResNet18(false, DType::kBFloat16, NonFinitePolicy::kSkipStep));
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_EQ(on.parameters, off.parameters);
  EXPECT_NE(on.losses[0], on.losses[2]);  // It trained.
}

}  // namespace
}  // namespace reprise
