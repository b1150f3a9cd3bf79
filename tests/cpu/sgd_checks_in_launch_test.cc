// sgd_multi with attr checks (TrainOptions::kernels.sgd_checks_in_launch): the fuse pass folds the
// guard's grad_nonfinite and loss_scale_check into the one checked SGD update (sticky under kStop,
// the 16-bit copies kept) and declines without the guard; its reference finds, counts and skips
// as the two nodes did; and ResNet-18's bfloat16 steps keep their bits on the CPU reference.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

passes::CompiledStep Compile(bool in_launch, NonFinitePolicy policy) {
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.non_finite.policy = policy;
  options.plan.lanes = 2;
  options.plan.fusion.sgd_checks_in_launch = in_launch;
  return testing::CompileSmallResNet18(options);
}

int Count(const Graph& g, absl::string_view op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

const Node* OnlySgdMulti(const Graph& g) {
  const Node* found = nullptr;
  for (const Node& node : g.nodes()) {
    if (node.op_name() != "sgd_multi") continue;
    if (found != nullptr) return nullptr;
    found = &node;
  }
  return found;
}

TEST(SgdChecksInLaunchTest, TheGuardsTwoNodesFoldIntoTheUpdate) {
  for (NonFinitePolicy policy : {NonFinitePolicy::kSkipStep, NonFinitePolicy::kStop}) {
    const passes::CompiledStep on = Compile(true, policy);
    const Graph& g = on.plan.graph();
    const Node* sgd = OnlySgdMulti(g);
    ASSERT_NE(sgd, nullptr);
    EXPECT_EQ(ir::IntAttr(sgd->attrs, "checks").value_or(-1), 1);  // The loss.
    EXPECT_EQ(ir::BoolAttrOr(sgd->attrs, "sticky", false), policy == NonFinitePolicy::kStop);
    EXPECT_GT(ir::IntAttr(sgd->attrs, "copies").value_or(0), 20);
    EXPECT_EQ(sgd->name, "sgd.all+non_finite.check");
    EXPECT_EQ(Count(g, "grad_nonfinite"), 0);
    EXPECT_EQ(Count(g, "loss_scale_check"), 0);
    const passes::CompiledStep off = Compile(false, policy);
    EXPECT_EQ(Count(off.plan.graph(), "grad_nonfinite"), 1);
    EXPECT_EQ(Count(off.plan.graph(), "loss_scale_check"), 1);
    EXPECT_FALSE(OnlySgdMulti(off.plan.graph())->attrs.contains("checks"));
  }
  // Unguarded, nothing is checked: no sgd_multi at all (the updates keep their own launches).
  EXPECT_EQ(OnlySgdMulti(Compile(true, NonFinitePolicy::kIgnore).plan.graph()), nullptr);
}

TEST(SgdChecksInLaunchTest, ResNet18Bf16StepsKeepTheirBits) {
  const testing::ReferenceSteps on =
      testing::ThreeReferenceSteps(Compile(true, NonFinitePolicy::kSkipStep));
  const testing::ReferenceSteps off =
      testing::ThreeReferenceSteps(Compile(false, NonFinitePolicy::kSkipStep));
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_EQ(on.parameters, off.parameters);
  EXPECT_NE(on.losses[0], on.losses[2]);  // It trained.
}

// One checked update of w (gradient g) with the loss checked too: found where g or the loss is not
// finite (or, sticky, once the record holds a step), counted, and nothing updated then.
struct Checked {
  std::vector<double> w, check;
  std::vector<int32_t> skipped, record;
};
Checked RunChecked(double g0, double loss, bool sticky, std::vector<int32_t> record) {
  Graph g;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  const Value w = *g.AddParameter("w", {Shape{3}}, Initializer::Constant(1));
  const Value grad = *g.AddInput("g", {Shape{3}}, Initializer::Constant(0.5));
  const Value v = *g.AddState("v", {Shape{3}}, Initializer::Zeros());
  const Value wd = *g.AddConstant("wd", scalar, Initializer::Zeros());
  const Value lr = *g.AddInput("lr", scalar, Initializer::Constant(0.1));
  const Value mu = *g.AddInput("mu", scalar, Initializer::Constant(0.9));
  const Value l = *g.AddInput("loss", scalar, Initializer::Zeros());
  const Value skipped = *g.AddState("skipped", {Shape{}, DType::kInt32}, Initializer::Zeros());
  const Value rec = *g.AddState("record", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  const Value words = *g.AddState("words", {Shape{4}, DType::kInt32}, Initializer::Zeros());
  Attrs attrs = {{"tensors", int64_t{1}}, {"checks", int64_t{1}}};
  if (sticky) attrs["sticky"] = true;
  auto check =
      g.AddOp(ops::SgdMultiOp(), "sgd", {w, grad, v, wd, lr, mu, l, skipped, rec, words}, attrs);
  EXPECT_TRUE(check.ok()) << check.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 1);
  EXPECT_TRUE(cpu.SetLeaf("g", std::vector<double>{g0, 0.5, 0.5}).ok());
  EXPECT_TRUE(cpu.SetLeaf("loss", std::vector<double>{loss}).ok());
  EXPECT_TRUE(cpu.SetLeaf("record", record).ok());
  EXPECT_TRUE(cpu.Run().ok());
  auto ints = [&](const std::string& name) {
    auto data = (*cpu.Leaf(name))->data<int32_t>();
    return std::vector<int32_t>(data.begin(), data.end());
  };
  auto floats = [](const ir::HostTensor& t) {
    std::vector<double> out;
    for (int64_t i = 0; i < t.spec().shape.NumElements(); ++i)
      out.push_back(ir::FloatElement(t, i));
    return out;
  };
  auto out = cpu.Tensor((*check)[0]);
  EXPECT_TRUE(out.ok()) << out.status();
  return {floats(**cpu.Leaf("w")), out.ok() ? floats(**out) : std::vector<double>{},
          ints("skipped"), ints("record")};
}

TEST(SgdChecksInLaunchTest, ItsReferenceFindsCountsAndSkipsAsTheGuardsNodes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Checked clean = RunChecked(0.5, 2.0, false, {4, 0});
  EXPECT_EQ(clean.check, (std::vector<double>{1, 0}));
  EXPECT_EQ(clean.skipped, (std::vector<int32_t>{0}));
  EXPECT_EQ(clean.record, (std::vector<int32_t>{5, 0}));
  EXPECT_NE(clean.w, (std::vector<double>{1, 1, 1}));  // Updated.
  for (const auto& [g0, loss] : {std::pair{nan, 2.0}, {0.5, inf}}) {
    const Checked found = RunChecked(g0, loss, false, {4, 0});
    EXPECT_EQ(found.check, (std::vector<double>{1, 1}));
    EXPECT_EQ(found.skipped, (std::vector<int32_t>{1}));
    EXPECT_EQ(found.record, (std::vector<int32_t>{5, 5}));  // 1 + the step found.
    EXPECT_EQ(found.w, (std::vector<double>{1, 1, 1}));
  }
  // kStop: a clean step after a found one is found too, and the first found stays recorded.
  const Checked stuck = RunChecked(0.5, 2.0, true, {6, 3});
  EXPECT_EQ(stuck.check, (std::vector<double>{1, 1}));
  EXPECT_EQ(stuck.record, (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(stuck.w, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(RunChecked(0.5, 2.0, false, {6, 3}).check, (std::vector<double>{1, 0}));
}

}  // namespace
}  // namespace reprise
