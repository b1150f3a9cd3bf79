// The "classes" attribute of softmax cross-entropy (logits padded with columns that are no
// class): the shape rule and its refusals, the CPU reference against a double computation over
// the real columns (the padding's gradient exactly 0, the loss that of the unpadded logits), labels
// at or past the classes refused, the fused pair and the label checks keeping the attribute, the
// gradient against finite differences in float64, and a bfloat16 step with no float32 copy of
// the padded logits.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/api/input_checks.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "src/ops/resize_rows.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Attrs Classes(int64_t classes) { return {{ops::kLossClassesAttr, classes}}; }

TEST(LossClassesTest, AttributeMustBeAnIntegerWithinTheColumns) {
  Graph g;
  Value z = *g.AddInput("z", {Shape{4, 10}});
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value dloss = *g.AddInput("dloss", {Shape{}});
  EXPECT_TRUE(g.AddOp1(ops::SoftmaxCrossEntropyOp(), "ok", {z, labels}, Classes(7)).ok());
  EXPECT_TRUE(g.AddOp1(ops::SoftmaxCrossEntropyOp(), "all", {z, labels}, Classes(10)).ok());
  const std::vector<std::pair<Attrs, const char*>> bad = {
      {Classes(0), "'classes' (0) must be in [1, 10]"},
      {Classes(11), "'classes' (11) must be in [1, 10]"},
      {{{ops::kLossClassesAttr, 3.0}}, "'classes' must be an integer"}};
  int i = 0;
  for (const auto& [attrs, why] : bad) {
    const std::string name = "bad" + std::to_string(i++);
    for (const absl::Status& status :
         {g.AddOp1(ops::SoftmaxCrossEntropyOp(), name, {z, labels}, attrs).status(),
          g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), name + "_grad", {z, labels, dloss}, attrs)
              .status(),
          g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), name + "_both", {z, labels, dloss}, attrs)
              .status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_THAT(status.message(), AllOf(HasSubstr(name), HasSubstr(why)));
    }
  }
}

// The loss and gradient over the first `classes` columns, in double from the float logits.
struct Expected {
  double loss = 0;
  std::vector<double> grad;
};
Expected Reference(const ir::HostTensor& z, const std::vector<int32_t>& labels, int64_t classes,
                   double dloss) {
  const int64_t rows = z.spec().shape.dim(0), cols = z.spec().shape.dim(1);
  Expected e;
  e.grad.assign(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, ir::FloatElement(z, r * cols + c));
    for (int64_t c = 0; c < classes; ++c) s += std::exp(ir::FloatElement(z, r * cols + c) - m);
    e.loss += (std::log(s) + m - ir::FloatElement(z, r * cols + labels[r])) / rows;
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(ir::FloatElement(z, r * cols + c) - m) / s;
      e.grad[r * cols + c] = dloss / rows * (p - (c == labels[r] ? 1.0 : 0.0));
    }
  }
  return e;
}

// Large padding logits would dominate the softmax if they took part: they must not.
TEST(LossClassesTest, ReferenceLeavesThePaddingColumnsOut) {
  constexpr int64_t kRows = 5, kCols = 16, kClasses = 11;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Graph g;
    Value z = *g.AddConstant("z", {Shape{kRows, kCols}, dtype}, Initializer::Uniform(-3, 9));
    Value labels = *g.AddInput("labels", {Shape{kRows}, DType::kInt32});
    Value dloss = *g.AddConstant("dloss", {Shape{}, DType::kFloat32}, Initializer::Constant(2.0));
    Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels}, Classes(kClasses));
    Value grad =
        *g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss}, Classes(kClasses));
    auto both = g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "both", {z, labels, dloss},
                        Classes(kClasses));
    ASSERT_TRUE(both.ok()) << both.status();
    ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
    const std::vector<int32_t> label_values = {0, 10, 4, 7, 1};
    ASSERT_TRUE(cpu.SetLeaf("labels", label_values).ok());
    ASSERT_TRUE(cpu.Run().ok());
    const Expected e = Reference(**cpu.Tensor(z), label_values, kClasses, 2.0);
    for (Value l : {loss, (*both)[0]}) {
      EXPECT_NEAR((*cpu.Tensor(l))->data<float>()[0], e.loss, 1e-5 * e.loss) << DTypeName(dtype);
    }
    for (Value d : {grad, (*both)[1]}) {
      const ir::HostTensor& dz = **cpu.Tensor(d);
      for (int64_t i = 0; i < kRows * kCols; ++i) {
        if (i % kCols >= kClasses) {
          EXPECT_EQ(ir::FloatElement(dz, i), 0.0) << i;  // Exactly 0.
        } else {
          EXPECT_NEAR(ir::FloatElement(dz, i), e.grad[i], std::abs(e.grad[i]) / 128 + 1e-7) << i;
        }
      }
    }
  }
}

TEST(LossClassesTest, LabelsAtOrPastTheClassesAreRefused) {
  Graph g;
  Value z = *g.AddConstant("z", {Shape{3, 8}}, Initializer::Uniform(-1, 1));
  Value labels = *g.AddInput("labels", {Shape{3}, DType::kInt32});
  ASSERT_TRUE(g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels}, Classes(6)).ok());
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
  ASSERT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{0, 5, 2}).ok());
  EXPECT_TRUE(cpu.Run().ok());
  ASSERT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{0, 6, 2}).ok());
  const absl::Status status = cpu.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("label 6 of row 1 is outside [0, 6)"));
}

// A language model's head over a vocabulary of 300 padded to 384 (the table through resize_rows).
struct PaddedHead {
  Graph g;
  Value loss;
};
PaddedHead BuildPaddedHead(int64_t tokens, int64_t vocab, int64_t padded, int64_t width) {
  PaddedHead h;
  Graph& g = h.g;
  Value ids = *g.AddInput("ids", {Shape{tokens}, DType::kInt32});
  Value labels = *g.AddInput("labels", {Shape{tokens}, DType::kInt32});
  Value x = *nn::Embedding(g, ids, vocab, width, "wte");
  x = *nn::LayerNorm(g, x, "ln_f");
  Value table{*g.FindNode("wte.weight"), 0};
  Value head = *g.AddOp1(ops::ResizeRowsOp(), "lm_head.pad", {table}, {{"rows", padded}});
  Value logits = *g.AddOp1(ops::MatmulOp(), "lm_head", {x, head}, {{"transpose_b", true}});
  h.loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels}, Classes(vocab));
  return h;
}

// The fused loss-and-gradient keeps the real classes; the labels are checked against them; in
// bfloat16 the padded logits have no float32 copy and the pad reads the bfloat16 table.
TEST(LossClassesTest, Bf16StepFusesWithTheClassesAndChecksLabelsAgainstThem) {
  constexpr int64_t kTokens = 64, kVocab = 300, kPadded = 384;
  PaddedHead h = BuildPaddedHead(kTokens, kVocab, kPadded, 32);
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  auto step =
      passes::CompileStep(h.g, h.loss, CompileOptionsFor(options, codegen::MlpStepTarget{}));
  ASSERT_TRUE(step.ok()) << step.status();
  const Graph& plan = step->plan.graph();
  const Shape logits_shape{kTokens, kPadded};
  int xent = 0, pads = 0;
  for (const Node& n : plan.nodes()) {
    for (const TensorSpec& out : n.outputs) {
      EXPECT_FALSE(out.shape == logits_shape && out.dtype == DType::kFloat32)
          << n.name << " (" << n.op_name() << ") writes " << out.ToString();
    }
    if (n.op == &ops::ResizeRowsOp() && n.outputs[0].shape == (Shape{kPadded, 32})) {
      ++pads;
      EXPECT_EQ(n.outputs[0].dtype, DType::kBFloat16) << n.name;
    }
    if (n.op != &ops::SoftmaxCrossEntropyWithGradOp()) continue;
    ++xent;
    EXPECT_EQ(std::get<int64_t>(n.attrs.at(ops::kLossClassesAttr)), kVocab);
    EXPECT_EQ(plan.spec(n.inputs[0]), (TensorSpec{logits_shape, DType::kBFloat16}));
  }
  EXPECT_EQ(xent, 1);
  EXPECT_EQ(pads, 1);
  bool labels_checked = false;
  for (const LabelUse& use : LabelUsesOf(step->unfused_training)) {
    if (use.input != "labels") continue;
    labels_checked = true;
    EXPECT_EQ(use.classes, kVocab);
  }
  EXPECT_TRUE(labels_checked);
}

TEST(LossClassesTest, PaddedHeadGradientsMatchFiniteDifferencesInFloat64) {
  PaddedHead h = BuildPaddedHead(6, 5, 8, 4);
  testing::ExpectGradientsMatchFiniteDifferencesWithInputs(
      h.g, h.loss, {{"ids", {4, 0, 2, 2, 1, 3}}, {"labels", {0, 2, 4, 1, 3, 4}}}, 21);
}

}  // namespace
}  // namespace reprise
