// Mixed precision's gradients reach the optimizer in their 16-bit form: the global norm and the
// non-finite checks read them before their widening casts, and the multi-tensor updates fold the
// casts in (widening exactly on load), so no gradient is cast to float32 by a launch of its own;
// the step keeps the bits of the path with the casts. Under data parallelism the norm and the
// checks read the averaged gradients. The parameters' 16-bit copies are made in one launch
// (cast_multi) with the casts' bits.
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/cast_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/all_reduce.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/gradient_buckets.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/pipeline.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/reference_runs.h"
#include "tests/cpu/sixteen_bit_gradient_step.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

std::string Bytes(const ir::HostTensor& t) {
  return std::string(static_cast<const char*>(t.raw()), t.spec().bytes());
}

// grad_sum_squares and adam_multi reading bfloat16 and float16 gradients give the bits of their
// reading the gradients' float32 casts: plain, loss-scaled, and a skipped step.
TEST(SixteenBitGradientsTest, NormAndAdamMultiReferencesGiveTheCastsBits) {
  for (const char* mode : {"plain", "scaled", "skipped"}) {
    SCOPED_TRACE(mode);
    const bool scaled = std::string(mode) != "plain";
    auto direct = testing::BuildSixteenBitGradientStep(14, /*widening_casts=*/false, scaled);
    auto cast = testing::BuildSixteenBitGradientStep(14, /*widening_casts=*/true, scaled);
    ASSERT_TRUE(direct.ok()) << direct.status();
    ASSERT_TRUE(cast.ok()) << cast.status();
    ir::ReferenceExecutor a(direct->graph, false, 5), b(cast->graph, false, 5);
    for (ir::ReferenceExecutor* cpu : {&a, &b}) {
      ASSERT_TRUE(cpu->SetLeaf("step", std::vector<int32_t>{7, 0}).ok());
      if (scaled) {
        const double found = std::string(mode) == "skipped" ? 1 : 0;
        ASSERT_TRUE(cpu->SetLeaf("check", std::vector<double>{0.125, found}).ok());
      }
    }
    // The same leaves: a bfloat16 gradient holds what its cast widens.
    ASSERT_EQ(Bytes(**a.Leaf("t1.g")), Bytes(**b.Leaf("t1.g")));
    const std::string before = Bytes(**a.Leaf("t0"));
    ASSERT_TRUE(a.Run().ok());
    ASSERT_TRUE(b.Run().ok());
    EXPECT_EQ(Bytes(**a.Tensor(direct->partials)), Bytes(**b.Tensor(cast->partials)));
    for (const std::string& name : direct->state) {
      EXPECT_EQ(Bytes(**a.Leaf(name)), Bytes(**b.Leaf(name))) << name;
    }
    EXPECT_EQ(Bytes(**a.Leaf("t0")) == before, std::string(mode) == "skipped");
  }
}

TEST(SixteenBitGradientsTest, ShapeRulesNameTheGradient) {
  Graph g;
  const Value w = *g.AddParameter("w", {Shape{8}}, Initializer::Zeros());
  const Value bad = *g.AddConstant("labels", {Shape{8}, DType::kInt32}, Initializer::Zeros());
  auto norm = g.AddOp1(ops::GradSumSquaresOp(), "norm", {w, bad});
  EXPECT_EQ(norm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(norm.status().message(), HasSubstr("gradient 1 must be float32, bfloat16"));
  // adam_multi: a 16-bit gradient must have its weight's shape.
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  const Value g16 = *g.AddConstant("g", {Shape{4}, DType::kBFloat16}, Initializer::Zeros());
  const Value m = *g.AddState("m", {Shape{8}}, Initializer::Zeros());
  const Value v = *g.AddState("v", {Shape{8}}, Initializer::Zeros());
  const Value wd = *g.AddInput("wd", scalar, Initializer::Zeros());
  std::vector<Value> inputs = {w, g16, m, v, wd};
  for (const char* name : {"lr", "beta1", "beta2", "eps"}) {
    inputs.push_back(*g.AddInput(name, scalar, Initializer::Zeros()));
  }
  inputs.insert(inputs.begin() + 6,
                *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros()));
  auto adam = g.AddOp(ops::AdamMultiOp(), "adam", inputs, {{"tensors", int64_t{1}}});
  EXPECT_EQ(adam.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(adam.status().message(), HasSubstr("tensor 0"));
}

// Runs `steps` steps of `g` on the CPU reference with fixed inputs: the losses, then every
// parameter's bytes.
std::vector<std::string> RunSteps(const Graph& g, Value loss, int steps) {
  ir::ReferenceExecutor cpu(g, false, 7);
  std::mt19937 rng(3);
  std::vector<std::string> out;
  for (int s = 0; s < steps; ++s) {
    testing::SetMlpBatch(cpu, rng, s);
    EXPECT_TRUE(cpu.Run().ok());
    out.push_back(Bytes(**cpu.Tensor(loss)));
  }
  for (int32_t id : g.NodesOf("parameter"))
    out.push_back(g.node(id).name + Bytes(**cpu.Tensor({id, 0})));
  return out;
}

const OptimizerOptions kAdamW = {
    .kind = OptimizerKind::kAdamW,
    .learning_rate = 1e-3f,
    .weight_decay = 0.1f,
    .decay_rank1 = false,
    .max_grad_norm = 0.5f,
    .schedule = {.warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 20}};

// The 16-bit gradients' widening casts that a node of `g` reads (an update, the norm, a check).
int GradientCastsReadByTheOptimizer(const Graph& g) {
  int casts = 0;
  for (const Node& node : g.nodes()) {
    if (node.op->kind != ir::OpKind::kOptimizer) continue;
    for (const Value& v : node.inputs) {
      const Node& made = g.node(v.node);
      casts += made.op_name() == "cast" && IsLowPrecision(g.spec(made.inputs[0]).dtype);
    }
  }
  return casts;
}

class FoldedAdamGradientCastsTest : public ::testing::TestWithParam<DType> {};

// AdamW with clipping, a schedule and the non-finite guard (float16: loss scaling too): the norm
// and the check read the 16-bit gradients, adam_multi folds every cast, and three steps give the
// bits of the same fusions with the casts kept.
TEST_P(FoldedAdamGradientCastsTest, UpdatesReadThe16BitGradientsAndTheStepKeepsItsBits) {
  const DType compute = GetParam();
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 24, .depth = 3, .width = 64, .classes = 10});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, compute);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto training = autodiff::BuildTrainingGraphWith(mixed->graph, mixed->loss, kAdamW,
                                                   autodiff::ResolveLossScaling({}, compute),
                                                   {NonFinitePolicy::kSkipStep});
  ASSERT_TRUE(training.ok()) << training.status();
  for (const char* op : {"grad_sum_squares", "grad_nonfinite"}) {
    for (int32_t id : training->graph.NodesOf(op)) {
      const Node& node = training->graph.node(id);
      int narrow = 0;
      for (const Value& v : node.inputs) narrow += training->graph.spec(v).dtype == compute;
      EXPECT_EQ(narrow, static_cast<int>(training->parameters.size())) << op;
    }
  }
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(*training, {training->loss}, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  EXPECT_EQ(GradientCastsReadByTheOptimizer(g), 0);
  int adam = 0, narrow = 0;
  for (const Node& node : g.nodes()) {
    if (node.op_name() == "cast") {
      EXPECT_FALSE(IsLowPrecision(g.spec(node.inputs[0]).dtype))
          << "a widening cast: " << node.name;
    }
    if (node.op_name() != "adam_multi") continue;
    ++adam;
    const int64_t tensors = *ir::IntAttr(node.attrs, "tensors");
    for (int64_t i = 1; i < 5 * tensors; i += 5) {
      narrow += g.spec(node.inputs[i]).dtype == compute;
    }
  }
  EXPECT_EQ(adam, 1);
  EXPECT_EQ(narrow, static_cast<int>(training->parameters.size()));  // Every layer's w and b.
  for (const auto& [parameter, gradient] : fused->training.gradients) {
    EXPECT_EQ(g.spec(gradient).dtype, compute) << g.node(parameter).name;
  }
  options.fold_gradient_casts = false;
  auto kept = passes::Fuse(*training, {training->loss}, options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(GradientCastsReadByTheOptimizer(kept->training.graph),
            static_cast<int>(training->parameters.size()));
  EXPECT_EQ(RunSteps(g, fused->training.loss, 3),
            RunSteps(kept->training.graph, kept->training.loss, 3));
}

INSTANTIATE_TEST_SUITE_P(Bf16AndF16, FoldedAdamGradientCastsTest,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// Under data parallelism the norm and the guard read the averaged gradients, not this rank's.
TEST(SixteenBitGradientsTest, DataParallelNormAndGuardReadTheAverages) {
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 32, .depth = 3, .width = 64});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto t = autodiff::BuildTrainingGraphWith(mixed->graph, mixed->loss, kAdamW, {},
                                            {NonFinitePolicy::kSkipStep});
  ASSERT_TRUE(t.ok()) << t.status();
  auto buckets = passes::AssignGradientBuckets(*t, 8000);
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  auto averaged = passes::AverageGradients(*t, *buckets);
  ASSERT_TRUE(averaged.ok()) << averaged.status();
  const Graph& g = averaged->graph;
  int checked = 0;
  for (const char* op : {"grad_sum_squares", "grad_nonfinite"}) {
    for (int32_t id : g.NodesOf(op)) {
      const Node& node = g.node(id);
      // The guard's last input is the loss.
      const size_t gradients = node.inputs.size() - (std::string(op) == "grad_nonfinite");
      for (size_t i = 0; i < gradients; ++i) {
        EXPECT_EQ(g.node(node.inputs[i].node).op, &ops::AllReduceOp()) << op << " input " << i;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int>(t->parameters.size()));
}

// GPT-2 124M in bfloat16 as reprise-bench trains it (AdamW, clipping, warm-up and cosine, the
// guard): no gradient is widened by a launch of its own. Prints the plan's launches with the
// casts folded and kept (the path before).
TEST(SixteenBitGradientsTest, Gpt2SmallBf16PlanHasNoGradientCastLaunches) {
  auto gpt = models::BuildGpt2({});
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.optimizer = {
      .kind = OptimizerKind::kAdamW,
      .learning_rate = 6e-4f,
      .beta1 = 0.9f,
      .beta2 = 0.95f,
      .weight_decay = 0.1f,
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      .schedule = {.warmup_steps = 100, .decay = LrDecay::kCosine, .total_steps = 1000}};
  options.plan.lanes = 0;
  // 0: the path before (a launch per cast); 1: gradient casts folded; 2: and the parameters'
  // copies in one cast_multi; 3: those copies kept between steps (refresh_copies, the default).
  std::map<int, int> launches, casts, widening, multi, refresh;
  for (int variant : {0, 1, 2, 3}) {
    options.plan.fusion.fold_gradient_casts = variant >= 1;
    options.plan.fusion.multi_tensor_casts = variant >= 2;
    options.plan.fusion.update_writes_copies = variant == 3;
    auto compiled = passes::CompileStep(gpt->graph, gpt->loss, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const passes::Plan& plan = compiled->plan;
    const Graph& g = plan.graph();
    launches[variant] = static_cast<int>(plan.launches.size());
    for (const passes::ScheduledLaunch& l : plan.launches) {
      const Node& node = g.node(l.node);
      multi[variant] += node.op_name() == "cast_multi";
      refresh[variant] += node.op_name() == "refresh_copies";
      if (node.op_name() != "cast") continue;
      ++casts[variant];
      widening[variant] += IsLowPrecision(g.spec(node.inputs[0]).dtype);
    }
    if (variant >= 1) {
      EXPECT_EQ(GradientCastsReadByTheOptimizer(g), 0);
    }
    std::cout << "GPT-2 124M bf16 plan, "
              << (variant == 0   ? "casts as before"
                  : variant == 1 ? "gradient casts folded"
                  : variant == 2 ? "gradient casts folded, parameter casts in one launch"
                                 : "gradient casts folded, parameter copies kept")
              << ": " << launches[variant] << " launches, " << casts[variant] << " casts ("
              << widening[variant] << " widening), " << multi[variant] << " cast_multi\n";
  }
  EXPECT_EQ(widening[1], 0);
  EXPECT_GT(widening[0], 90);  // Every matrix and bias but layer norm's.
  EXPECT_EQ(launches[0] - launches[1], widening[0]);
  // Every parameter's copy in one launch.
  EXPECT_EQ(casts[2], 0);
  EXPECT_EQ(multi[2], 1);
  EXPECT_EQ(launches[1] - launches[2], casts[1] - 1);
  // Or kept: the one launch refreshes them only after the host wrote the weights.
  EXPECT_EQ(casts[3], 0);
  EXPECT_EQ(multi[3], 0);
  EXPECT_EQ(refresh[3], 1);
  EXPECT_EQ(launches[3], launches[2]);
}

// cast_multi: the casts' bits (so a step keeps its bits), shapes named in errors, and a kernel
// that compiles for every capacity and both 16-bit types.
TEST(CastMultiTest, GivesTheCastsBitsAndNamesBadInputs) {
  Graph g;
  std::vector<Value> x;
  for (int t = 0; t < 5; ++t) {
    x.push_back(*g.AddParameter("p" + std::to_string(t), {testing::GradientStepShape(t)},
                                Initializer::Uniform(-70000, 70000)));
  }
  for (DType to : {DType::kBFloat16, DType::kFloat16}) {
    auto multi = g.AddOp(ops::CastMultiOp(), "multi." + std::string(DTypeName(to)), x,
                         {{"dtype", ops::DTypeAttr(to)}});
    ASSERT_TRUE(multi.ok()) << multi.status();
    // What Trainer creation prefetches is what the lowering compiles.
    const std::vector<codegen::GeneratedKernel> prefetched =
        ops::ChunkedKernelsOf(g.node((*multi)[0].node));
    ASSERT_EQ(prefetched.size(), 1u);
    EXPECT_EQ(prefetched[0].code, codegen::CastMulti(32, to).code);
    std::vector<Value> single;
    for (int t = 0; t < 5; ++t) {
      single.push_back(*g.AddOp1(ops::CastOp(), absl::StrCat("single", t, DTypeName(to)), {x[t]},
                                 {{"dtype", ops::DTypeAttr(to)}}));
    }
    ir::ReferenceExecutor cpu(g, false, 3);
    ASSERT_TRUE(cpu.Run().ok());
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(g.spec((*multi)[t]), g.spec(single[t]));
      EXPECT_EQ(Bytes(**cpu.Tensor((*multi)[t])), Bytes(**cpu.Tensor(single[t]))) << t;
    }
  }
  auto wide = g.AddOp(ops::CastMultiOp(), "wide", x, {{"dtype", std::string("f32")}});
  EXPECT_THAT(wide.status().message(), HasSubstr("bf16 or f16"));
  const Value labels = *g.AddInput("labels", {Shape{3}, DType::kInt32}, Initializer::Zeros());
  auto ints = g.AddOp(ops::CastMultiOp(), "ints", {x[0], labels}, {{"dtype", std::string("bf16")}});
  EXPECT_THAT(ints.status().message(), HasSubstr("tensor 1"));
  for (int capacity : {32, codegen::kMaxMultiTensorCapacity}) {
    for (DType to : {DType::kBFloat16, DType::kFloat16}) {
      for (bool refresh : {false, true}) {  // refresh_copies' kernel too, with its flag.
        const codegen::GeneratedKernel kernel = codegen::CastMulti(capacity, to, refresh);
        auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
        ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
        EXPECT_NE(compiled->ptx.find(absl::StrCat(kernel.name, "_param_0[",
                                                  ops::ChunkTable(capacity, 2).bytes(), "]")),
                  std::string::npos)
            << kernel.name;
        EXPECT_EQ(compiled->ptx.find(kernel.name + "_param_2") != std::string::npos, refresh)
            << kernel.name;
      }
    }
  }
}

// In a bfloat16 ResNet plan too: the convolution and classifier weights' copies in one launch
// where the first was made, read by every layer after it (with SGD's updates a launch per 32
// tensors, which do not keep the copies; in one launch they keep them: SgdMultiTest).
TEST(CastMultiTest, ResNetBf16PlanCastsItsWeightsInOneLaunch) {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .classes = 3, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.plan.fusion.sgd_one_launch = false;
  auto compiled = passes::CompileStep(net->graph, net->loss, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const passes::Plan& plan = compiled->plan;
  const Graph& g = plan.graph();
  int multi = 0, casts = 0;
  size_t tensors = 0;
  for (const passes::ScheduledLaunch& l : plan.launches) {
    const Node& node = g.node(l.node);
    casts += node.op_name() == "cast" && g.node(node.inputs[0].node).op == &ir::ParameterOp();
    if (node.op_name() != "cast_multi") continue;
    ++multi;
    tensors = node.inputs.size();
  }
  EXPECT_EQ(multi, 1);
  EXPECT_EQ(casts, 0);
  EXPECT_GT(tensors, 20u);  // Every convolution's weight and the classifier's.
}

}  // namespace
}  // namespace reprise
