// models::BuildGpt2 without a GPU: nanoGPT's names, shapes and parameter count, the tied output
// projection (its gradient is the sum of both uses' gradients, padded vocabulary or not), the
// logits padded to a multiple of 128 with zero columns that leave the loss as it was, nanoGPT's
// initialisation, refused configs that leave the graph as it was, the loss at initialisation on
// the CPU reference, float64 gradients against finite differences, and the whole step planned in
// bfloat16.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/optimizer.h"
#include "src/api/input_checks.h"
#include "src/api/models_gpt2.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/loss_checks.h"
#include "src/ops/resize_rows.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using models::Gpt2Config;
using ::testing::HasSubstr;

// 2 layers, 16 wide, 2 heads, 32 tokens, sequences of 8 out of 12 positions, batch 2.
Gpt2Config Small() {
  return {
      .batch = 2, .seq = 8, .max_positions = 12, .vocab = 32, .layers = 2, .heads = 2, .width = 16};
}

std::map<std::string, Shape> ParameterShapes(const Graph& g) {
  std::map<std::string, Shape> shapes;
  for (int32_t id : g.NodesOf("parameter")) shapes[g.node(id).name] = g.node(id).outputs[0].shape;
  return shapes;
}

// nanoGPT's state dict, lm_head.weight left out (it is transformer.wte.weight).
std::map<std::string, Shape> NanoGptShapes(const Gpt2Config& c) {
  const int64_t C = c.width;
  std::map<std::string, Shape> s = {{"transformer.wte.weight", Shape{c.vocab, C}},
                                    {"transformer.wpe.weight", Shape{c.max_positions, C}},
                                    {"transformer.ln_f.weight", Shape{C}},
                                    {"transformer.ln_f.bias", Shape{C}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      s[h + ln + ".weight"] = Shape{C};
      s[h + ln + ".bias"] = Shape{C};
    }
    s[h + "attn.c_attn.weight"] = Shape{3 * C, C};
    s[h + "attn.c_attn.bias"] = Shape{3 * C};
    s[h + "attn.c_proj.weight"] = Shape{C, C};
    s[h + "attn.c_proj.bias"] = Shape{C};
    s[h + "mlp.c_fc.weight"] = Shape{4 * C, C};
    s[h + "mlp.c_fc.bias"] = Shape{4 * C};
    s[h + "mlp.c_proj.weight"] = Shape{C, 4 * C};
    s[h + "mlp.c_proj.bias"] = Shape{C};
  }
  return s;
}

TEST(Gpt2ModelTest, DefaultIsGpt2SmallWith124439808Parameters) {
  auto gpt = models::BuildGpt2({});
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  EXPECT_EQ(gpt->graph.NumParameterElements(), 124'439'808);
  EXPECT_EQ(ParameterShapes(gpt->graph), NanoGptShapes({}));
}

TEST(Gpt2ModelTest, NamesShapesAndInputsAreNanoGpts) {
  const Gpt2Config c = Small();
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  const Graph& g = gpt->graph;
  EXPECT_EQ(ParameterShapes(g), NanoGptShapes(c));
  EXPECT_EQ(g.node(gpt->tokens.node).name, "tokens");
  EXPECT_EQ(g.node(gpt->targets.node).name, "targets");
  EXPECT_EQ(g.spec(gpt->tokens), (TensorSpec{Shape{2, 8}, DType::kInt32}));
  EXPECT_EQ(g.spec(gpt->targets), (TensorSpec{Shape{2, 8}, DType::kInt32}));
  // 32 tokens padded to 128 columns.
  EXPECT_EQ(models::Gpt2LogitsWidth(c), 128);
  EXPECT_EQ(g.spec(gpt->logits), (TensorSpec{Shape{16, 128}, DType::kFloat32}));
  EXPECT_EQ(g.spec(gpt->loss), (TensorSpec{Shape{}, DType::kFloat32}));
  EXPECT_EQ(g.node(gpt->loss.node).name, "loss");
  EXPECT_FALSE(g.FindNode("lm_head.weight").ok());
}

// The projection reads the very Value the embedding reads (one parameter, two readers), through
// a zero-row padding to the logits' width where that is wider than the vocabulary; the loss then
// takes the vocabulary's columns as its classes.
TEST(Gpt2ModelTest, OutputProjectionReadsTheTokenEmbeddingTable) {
  for (const int64_t padded_vocab : {int64_t{0}, int64_t{32}, int64_t{40}}) {
    Gpt2Config c = Small();
    c.padded_vocab = padded_vocab;
    auto gpt = models::BuildGpt2(c);
    ASSERT_TRUE(gpt.ok()) << gpt.status();
    const Graph& g = gpt->graph;
    const Value wte{*g.FindNode("transformer.wte.weight"), 0};
    const Node& head = g.node(gpt->logits.node);
    const Node& loss = g.node(gpt->loss.node);
    EXPECT_EQ(head.op_name(), "matmul");
    EXPECT_TRUE(std::get<bool>(head.attrs.at("transpose_b")));
    const int64_t width = padded_vocab == 0 ? 128 : padded_vocab;
    EXPECT_EQ(g.spec(gpt->logits).shape, (Shape{16, width}));
    if (width == c.vocab) {  // No padding.
      EXPECT_EQ(head.inputs[1], wte);
      EXPECT_FALSE(loss.attrs.contains(ops::kLossClassesAttr));
    } else {
      const Node& pad = g.node(head.inputs[1].node);
      EXPECT_EQ(pad.op, &ops::ResizeRowsOp());
      EXPECT_EQ(pad.name, "lm_head.pad");
      EXPECT_EQ(pad.inputs[0], wte);
      EXPECT_EQ(std::get<int64_t>(pad.attrs.at("rows")), width);
      EXPECT_EQ(std::get<int64_t>(loss.attrs.at(ops::kLossClassesAttr)), c.vocab);
    }
    int readers = 0;
    for (const Node& n : g.nodes()) {
      for (Value in : n.inputs) readers += in == wte;
    }
    EXPECT_EQ(readers, 2) << padded_vocab;
  }
}

// The padded logits' first vocab columns and the loss are those of the unpadded model (the same
// parameters by name and seed), and the padding columns are zeros.
TEST(Gpt2ModelTest, PaddedLogitsAreZeroColumnsBesideTheUnpaddedOnes) {
  Gpt2Config unpadded = Small();
  unpadded.vocab = 100;
  unpadded.padded_vocab = 100;
  Gpt2Config padded = unpadded;
  padded.padded_vocab = 0;  // 128.
  auto a = models::BuildGpt2(unpadded);
  auto b = models::BuildGpt2(padded);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ir::ReferenceExecutor ea(a->graph, /*float64=*/true, 6), eb(b->graph, /*float64=*/true, 6);
  std::vector<int32_t> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) tokens[i] = (i * 7 + 3) % 100, targets[i] = (i * 13 + 99) % 100;
  for (ir::ReferenceExecutor* e : {&ea, &eb}) {
    ASSERT_TRUE(e->SetLeaf("tokens", tokens).ok());
    ASSERT_TRUE(e->SetLeaf("targets", targets).ok());
    ASSERT_TRUE(e->Run().ok());
  }
  EXPECT_NEAR((*ea.Tensor(a->loss))->data<double>()[0], (*eb.Tensor(b->loss))->data<double>()[0],
              1e-12);
  auto za = (*ea.Tensor(a->logits))->data<double>();
  auto zb = (*eb.Tensor(b->logits))->data<double>();
  ASSERT_EQ(zb.size(), 16u * 128);
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t c = 0; c < 128; ++c) {
      if (c < 100) {
        EXPECT_NEAR(zb[r * 128 + c], za[r * 100 + c], 1e-12) << r << "," << c;
      } else {
        EXPECT_EQ(zb[r * 128 + c], 0.0) << r << "," << c;
      }
    }
  }
}

// float64 backward of the tied model and of the same model with lm_head.weight a parameter of its
// own holding the same values: the tied gradient is the sum of the untied two, without padding
// and with a vocabulary of 500 padded to 512 (the head's share: the padded gradient's first rows).
// The parameter: vocab and padded_vocab.
class Gpt2TyingTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(Gpt2TyingTest, TiedGradientIsTheSumOfBothUsesGradients) {
  Gpt2Config c = Small();
  std::tie(c.vocab, c.padded_vocab) = GetParam();
  const int32_t vocab = static_cast<int32_t>(c.vocab);
  Graph tied_graph, untied_graph;
  auto tied = models::AddGpt2Model(tied_graph, c, /*tie_output=*/true);
  auto untied = models::AddGpt2Model(untied_graph, c, /*tie_output=*/false);
  ASSERT_TRUE(tied.ok() && untied.ok()) << tied.status() << untied.status();
  auto tied_backward = autodiff::BuildBackward(tied_graph, tied->loss);
  auto untied_backward = autodiff::BuildBackward(untied_graph, untied->loss);
  ASSERT_TRUE(tied_backward.ok() && untied_backward.ok())
      << tied_backward.status() << untied_backward.status();
  ir::ReferenceExecutor a(tied_backward->graph, /*float64=*/true, 9);
  ir::ReferenceExecutor b(untied_backward->graph, /*float64=*/true, 9);
  std::vector<int32_t> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) {
    tokens[i] = (i * 7 + 3) % vocab;
    targets[i] = (i * 5 + 1 + (i == 3 ? vocab - 2 : 0)) % vocab;  // One label near the padding.
  }
  for (ir::ReferenceExecutor* e : {&a, &b}) {
    ASSERT_TRUE(e->SetLeaf("tokens", tokens).ok());
    ASSERT_TRUE(e->SetLeaf("targets", targets).ok());
  }
  // Same seed and names: every other parameter starts alike; the head gets the embedding's table.
  auto wte = (*b.Leaf("transformer.wte.weight"))->data<double>();
  auto head = (*b.Leaf("lm_head.weight"))->data<double>();
  std::copy(wte.begin(), wte.end(), head.begin());
  ASSERT_TRUE(a.Run().ok());
  ASSERT_TRUE(b.Run().ok());
  EXPECT_DOUBLE_EQ((*a.Tensor(tied->loss))->data<double>()[0],
                   (*b.Tensor(untied->loss))->data<double>()[0]);
  const auto grad = [](const autodiff::TrainingGraph& t, ir::ReferenceExecutor& e,
                       const char* name) {
    const Value g = t.gradients.at(*t.graph.FindNode(name));
    return (*e.Tensor(g))->data<double>();
  };
  auto sum_of = grad(*tied_backward, a, "transformer.wte.weight");
  auto from_embedding = grad(*untied_backward, b, "transformer.wte.weight");
  auto from_head = grad(*untied_backward, b, "lm_head.weight");
  ASSERT_EQ(sum_of.size(), from_embedding.size());
  double head_norm = 0, embedding_norm = 0;
  for (size_t i = 0; i < sum_of.size(); ++i) {
    EXPECT_NEAR(sum_of[i], from_embedding[i] + from_head[i], 1e-12) << i;
    head_norm += from_head[i] * from_head[i];
    embedding_norm += from_embedding[i] * from_embedding[i];
  }
  // Both uses contribute, so neither alone would pass.
  EXPECT_GT(head_norm, 1e-8);
  EXPECT_GT(embedding_norm, 1e-8);
  EXPECT_EQ(tied_backward->graph.FindNode("lm_head.pad").ok(),
            models::Gpt2LogitsWidth(c) > c.vocab);
}

INSTANTIATE_TEST_SUITE_P(UnpaddedAndPadded, Gpt2TyingTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{32, 32},
                                           std::pair<int64_t, int64_t>{500, 0}),
                         [](const auto& info) {
                           return "Vocab" + std::to_string(info.param.first) + "Logits" +
                                  std::to_string(
                                      models::Gpt2LogitsWidth({.vocab = info.param.first,
                                                               .padded_vocab = info.param.second}));
                         });

// Sample standard deviation and mean of a leaf as the initialisers fill it.
std::pair<double, double> StdAndMean(ir::ReferenceExecutor& e, const std::string& name) {
  auto v = (*e.Leaf(name))->data<float>();
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += static_cast<double>(x) * x;
  const double mean = sum / v.size();
  return {std::sqrt(sq / v.size() - mean * mean), mean};
}

TEST(Gpt2ModelTest, InitialisesAsNanoGpt) {
  Gpt2Config c = Small();
  c.width = 64;
  c.heads = 4;
  c.vocab = 256;
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  ir::ReferenceExecutor e(gpt->graph, /*float64=*/false, 4);
  const double proj = 0.02 / std::sqrt(2.0 * c.layers);
  for (const auto& [name, std] :
       std::vector<std::pair<std::string, double>>{{"transformer.wte.weight", 0.02},
                                                   {"transformer.wpe.weight", 0.02},
                                                   {"transformer.h.0.attn.c_attn.weight", 0.02},
                                                   {"transformer.h.1.mlp.c_fc.weight", 0.02},
                                                   {"transformer.h.0.attn.c_proj.weight", proj},
                                                   {"transformer.h.1.mlp.c_proj.weight", proj}}) {
    const auto [sample_std, mean] = StdAndMean(e, name);
    EXPECT_NEAR(sample_std, std, 0.1 * std) << name;
    EXPECT_NEAR(mean, 0, 0.1 * std) << name;
  }
  for (const char* name : {"transformer.h.0.attn.c_attn.bias", "transformer.h.1.mlp.c_proj.bias",
                           "transformer.h.0.ln_1.bias", "transformer.ln_f.bias"}) {
    for (float x : (*e.Leaf(name))->data<float>()) ASSERT_EQ(x, 0.0f) << name;
  }
  for (const char* name : {"transformer.h.1.ln_2.weight", "transformer.ln_f.weight"}) {
    for (float x : (*e.Leaf(name))->data<float>()) ASSERT_EQ(x, 1.0f) << name;
  }
}

TEST(Gpt2ModelTest, BadConfigsNameTheFieldAndLeaveTheGraphAsItWas) {
  const std::vector<std::pair<Gpt2Config, const char*>> bad = {
      {{.batch = 0}, "batch"},
      {{.seq = 0}, "seq"},
      {{.max_positions = -3}, "max_positions"},
      {{.vocab = 0}, "vocab"},
      {{.layers = 0}, "layers"},
      {{.heads = 0}, "heads"},
      {{.width = 0}, "width"},
      {{.init_std = 0}, "init_std"},
      {{.init_std = std::nan("")}, "init_std"},
      {{.heads = 5}, "heads (5) must divide width (768)"},
      {{.seq = 2048}, "seq (2048) must be at most max_positions (1024)"},
      {{.vocab = int64_t{1} << 40}, "vocab"},
      {{.batch = int64_t{1} << 40, .seq = 1 << 20, .max_positions = 1 << 20}, "batch, seq"},
      {{.layers = int64_t{1} << 50}, "layers must be at most 33554431 (the nodes a graph"},
      {{.layers = 1 << 20, .heads = 1, .width = int64_t{1} << 30}, "layers and width"},
      {{.padded_vocab = 50256}, "padded_vocab (50256) must be 0 or at least vocab (50257)"},
      {{.padded_vocab = -1}, "padded_vocab"},
      {{.padded_vocab = int64_t{1} << 31},
       "padded_vocab (2147483648, vocab 50257 padded) must fit"},
      {{.vocab = (int64_t{1} << 31) - 1}, "padded_vocab"},  // Rounded up past int32.
  };
  for (const auto& [config, field] : bad) {
    Graph g;
    ASSERT_TRUE(g.AddInput("x", {Shape{3}}).ok());
    const std::string before = g.ToString();
    auto gpt = models::AddGpt2(g, config);
    EXPECT_EQ(gpt.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(gpt.status().message(), HasSubstr(field));
    EXPECT_EQ(g.ToString(), before) << field;
    EXPECT_EQ(models::BuildGpt2(config).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// A name taken in the middle of the model fails there, and everything added before is removed.
TEST(Gpt2ModelTest, FailingHalfwayRollsTheGraphBack) {
  Graph g;
  ASSERT_TRUE(g.AddInput("transformer.h.1.ln_2.weight", {Shape{3}}).ok());
  const std::string before = g.ToString();
  auto gpt = models::AddGpt2(g, Small());
  EXPECT_FALSE(gpt.ok());
  EXPECT_THAT(gpt.status().message(), HasSubstr("transformer.h.1.ln_2.weight"));
  EXPECT_EQ(g.ToString(), before);
}

// Weights of standard deviation 0.02 give nearly uniform predictions: the loss starts near
// ln(vocab).
TEST(Gpt2ModelTest, CpuReferenceLossAtInitialisationIsNearLnVocab) {
  const Gpt2Config c = {.batch = 2,
                        .seq = 16,
                        .max_positions = 16,
                        .vocab = 512,
                        .layers = 2,
                        .heads = 4,
                        .width = 64};
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  ir::ReferenceExecutor e(gpt->graph, /*float64=*/false, 5);
  std::vector<int32_t> tokens(32), targets(32);
  for (int i = 0; i < 32; ++i) tokens[i] = (i * 37) % 512, targets[i] = (i * 101 + 7) % 512;
  ASSERT_TRUE(e.SetLeaf("tokens", tokens).ok());
  ASSERT_TRUE(e.SetLeaf("targets", targets).ok());
  ASSERT_TRUE(e.Run().ok());
  const float loss = (*e.Tensor(gpt->loss))->data<float>()[0];
  EXPECT_NEAR(loss, std::log(512.0), 0.05) << loss;
  EXPECT_EQ((*e.Tensor(gpt->logits))->spec().shape, (Shape{32, 512}));
}

TEST(Gpt2ModelTest, GradientsMatchFiniteDifferencesInFloat64) {
  // Large weights, so that every path (attention scores, GELU's curve) carries gradient.
  const Gpt2Config c = {.batch = 2,
                        .seq = 3,
                        .max_positions = 4,
                        .vocab = 5,
                        .layers = 1,
                        .heads = 2,
                        .width = 4,
                        .init_std = 0.5};
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  testing::ExpectGradientsMatchFiniteDifferencesWithInputs(
      gpt->graph, gpt->loss, {{"tokens", {4, 0, 2, 2, 1, 3}}, {"targets", {0, 2, 2, 1, 3, 4}}}, 13);
}

// The Trainer's pipeline in bfloat16 with nanoGPT's optimizer: planned, capturable, and both id
// inputs range-checked by what reads them (through the reshapes to rows).
TEST(Gpt2ModelTest, AdamWStepCompilesInBFloat16AndChecksTokenRanges) {
  const Gpt2Config c = Small();
  auto gpt = models::BuildGpt2(c);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.optimizer = {
      .kind = OptimizerKind::kAdamW,
      .learning_rate = 6e-4f,
      .beta2 = 0.95f,
      .weight_decay = 0.1f,
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      .schedule = {.warmup_steps = 10, .decay = LrDecay::kCosine, .total_steps = 100}};
  auto step = passes::CompileStep(gpt->graph, gpt->loss, options);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(ir::CheckCapturable(step->plan.graph()).ok());
  // The table is padded once per step, from the bfloat16 copy the embedding reads too: no float32
  // tensor of the padded table's size.
  const Graph& plan = step->plan.graph();
  const Shape padded_table{models::Gpt2LogitsWidth(c), c.width};
  int pads = 0;
  for (const Node& n : plan.nodes()) {
    for (const TensorSpec& out : n.outputs) {
      EXPECT_FALSE(out.shape == padded_table && out.dtype == DType::kFloat32) << n.name;
    }
    if (n.op != &ops::ResizeRowsOp() || n.outputs[0].shape != padded_table) continue;
    ++pads;
    EXPECT_EQ(n.outputs[0].dtype, DType::kBFloat16);
    const Node& source = plan.node(n.inputs[0].node);
    // The parameter's 16-bit copy, kept between steps and written by the update
    // (src/passes/parameter_copies.h).
    EXPECT_EQ(source.op_name(), "state") << source.name;
    EXPECT_TRUE(absl::EndsWith(source.name, ".bf16_copy")) << source.name;
    int embedding_reads = 0;
    for (const Node& reader : plan.nodes()) {
      embedding_reads += reader.op_name() == "embedding" && reader.inputs[1] == n.inputs[0];
    }
    EXPECT_EQ(embedding_reads, 1) << "the embedding reads another copy of the table";
  }
  EXPECT_EQ(pads, 1);
  std::vector<std::string> uses;
  for (const LabelUse& use : LabelUsesOf(step->unfused_training)) {
    uses.push_back(use.input + " < " + std::to_string(use.classes) + " (" + use.consumer + ")");
  }
  EXPECT_THAT(uses, ::testing::UnorderedElementsAre("tokens < 32 (transformer.wte)",
                                                    "targets < 32 (loss)"));
}

}  // namespace
}  // namespace reprise
