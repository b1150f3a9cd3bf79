// A tiny transformer-style model (embedding + positions -> layer_norm -> linear -> gelu -> linear
// -> softmax cross-entropy) on the CPU reference: its gradients match central finite differences
// in float64, and SGD lowers its loss.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/plan.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

struct TinyModel {
  Graph graph;
  Value loss;
};

// ids [batch·T] over `vocab` tokens; labels [batch·T].
TinyModel BuildTiny(int64_t batch, int64_t positions, int64_t vocab, int64_t width,
                    const char* ids_name) {
  TinyModel m;
  Graph& g = m.graph;
  Value ids = *g.AddInput(ids_name, {Shape{batch * positions}, DType::kInt32});
  Value labels = std::string(ids_name) == "labels"
                     ? ids
                     : *g.AddInput("labels", {Shape{batch * positions}, DType::kInt32});
  Value x = *nn::Embedding(g, ids, vocab, width, "wte", 0.5);
  x = *nn::PositionEmbedding(g, x, positions + 1, positions, "wpe", 0.5);
  x = *nn::LayerNorm(g, x, "ln");
  x = *nn::Gelu(g, *nn::Linear(g, x, 2 * width, "fc"), "gelu");
  m.loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, x, vocab, "proj"), labels, "loss");
  return m;
}

TEST(TransformerModelTest, GradientsMatchFiniteDifferences) {
  // The labels double as the ids (the helper feeds only "labels"): the model learns the identity.
  TinyModel m = BuildTiny(/*batch=*/2, /*positions=*/2, /*vocab=*/4, /*width=*/3, "labels");
  testing::ExpectGradientsMatchFiniteDifferences(m.graph, m.loss, {3, 0, 1, 3}, 21);
}

// Each next token is a fixed function of the current token and its position.
TEST(TransformerModelTest, SgdOnTheCpuReferenceLowersTheLoss) {
  constexpr int64_t kBatch = 4, kT = 4, kVocab = 8;
  TinyModel m = BuildTiny(kBatch, kT, kVocab, 8, "ids");
  auto training = autodiff::BuildTrainingGraph(m.graph, m.loss, {.learning_rate = 0.05f});
  ASSERT_TRUE(training.ok()) << training.status();
  ir::ReferenceExecutor exec(training->graph, /*float64=*/false, /*seed=*/3);
  std::vector<int32_t> ids(kBatch * kT), labels(kBatch * kT);
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    for (int64_t i = 0; i < kBatch * kT; ++i) {
      ids[i] = static_cast<int32_t>((i * 5 + step * 3) % kVocab);
      labels[i] = static_cast<int32_t>((ids[i] * 3 + i % kT) % kVocab);
    }
    ASSERT_TRUE(exec.SetLeaf("ids", ids).ok());
    ASSERT_TRUE(exec.SetLeaf("labels", labels).ok());
    ASSERT_TRUE(exec.Run().ok());
    const float loss = (*exec.Tensor(m.loss))->data<float>()[0];
    if (step < 10) first += loss / 10;
    if (step >= 290) last += loss / 10;
  }
  EXPECT_LT(last, 0.25f * first) << "first " << first << ", last " << last;
}

// The whole pipeline plans the model's AdamW step, in float32 and in bfloat16 mixed precision, and
// every launch of the plan can be captured.
TEST(TransformerModelTest, AdamWStepPlansAndIsCapturableInFloat32AndBFloat16) {
  for (DType compute : {DType::kFloat32, DType::kBFloat16}) {
    TinyModel m = BuildTiny(4, 8, 32, 16, "ids");
    auto mixed = passes::ConvertToMixedPrecision(m.graph, m.loss, {}, compute);
    ASSERT_TRUE(mixed.ok()) << mixed.status();
    OptimizerOptions adamw{.kind = OptimizerKind::kAdamW,
                           .learning_rate = 1e-3f,
                           .weight_decay = 0.1f,
                           .max_grad_norm = 1.0f};
    auto training = autodiff::BuildTrainingGraphWith(mixed->graph, mixed->loss, adamw);
    ASSERT_TRUE(training.ok()) << training.status();
    auto plan = passes::BuildPlan(*std::move(training), {});
    ASSERT_TRUE(plan.ok()) << DTypeName(compute) << ": " << plan.status();
    EXPECT_TRUE(ir::CheckCapturable(plan->graph()).ok()) << ir::CheckCapturable(plan->graph());
  }
}

}  // namespace
}  // namespace reprise
