// A mixed-precision step's optimizer over tensors whose gradients are float32, bfloat16 and
// float16 in turn, built two ways: the optimizer reading the 16-bit gradients themselves (as the
// fuse pass folds their widening casts in), or reading their float32 widening casts (the path
// before). Both have the same leaves in the same order, so a seed gives them the same values and
// their steps must give the same bits. Shared by the CPU test and the GPU test.
#ifndef REPRISE_TESTS_CPU_SIXTEEN_BIT_GRADIENT_STEP_H_
#define REPRISE_TESTS_CPU_SIXTEEN_BIT_GRADIENT_STEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::testing {

// Tensor t's gradient type: float32, bfloat16, float16 in turn.
inline DType GradientTypeOf(int t) {
  static constexpr DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  return kTypes[t % 3];
}

// Odd sizes (most not a multiple of 4, some of one element), whole and partial chunks of the norm
// (4096 elements), and one large tensor.
inline Shape GradientStepShape(int t) {
  static constexpr int64_t kSizes[] = {1, 3, 4, 5, 33, 1000, 4095, 4096, 4097, 8191, 12289};
  return Shape{t == 4 ? 70001 : kSizes[t % 11] + 2 * t};
}

struct SixteenBitGradientStep {
  Graph graph;
  Value partials;                  // grad_sum_squares' output.
  std::vector<std::string> state;  // Names of every w, m and v the update writes.
};

// grad_sum_squares over the gradients, then one adam_multi (AdamW, its own weight decay per
// tensor, a warm-up schedule and the clip norm folded in) reading the partial sums. `scaled` adds
// loss scaling's check (input "check", f32[2]) to both. With `widening_casts` every 16-bit
// gradient is read through a cast to float32, as before the fold. With `copies` = K, the first K
// weights have 16-bit copies ("t<i>.copy", bfloat16 and float16 in turn) that a refresh_copies
// first and the update then write, and the state "stale" (1) is their flag.
inline absl::StatusOr<SixteenBitGradientStep> BuildSixteenBitGradientStep(int tensors,
                                                                          bool widening_casts,
                                                                          bool scaled,
                                                                          int copies = 0) {
  SixteenBitGradientStep s;
  Graph& g = s.graph;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  const Initializer uniform = Initializer::Uniform(-1, 1);
  std::vector<std::vector<Value>> per_tensor;
  for (int t = 0; t < tensors; ++t) {
    const std::string name = "t" + std::to_string(t);
    const Shape shape = GradientStepShape(t);
    per_tensor.push_back({*g.AddParameter(name, {shape}, uniform),
                          *g.AddConstant(name + ".g", {shape, GradientTypeOf(t)}, uniform),
                          *g.AddState(name + ".m", {shape}, uniform),
                          *g.AddState(name + ".v", {shape}, Initializer::Uniform(0, 1))});
    for (const char* suffix : {"", ".m", ".v"}) s.state.push_back(name + suffix);
  }
  const Value lr = *g.AddInput("lr", scalar, Initializer::Constant(0.01));
  const Value step = *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  const Value beta1 = *g.AddInput("beta1", scalar, Initializer::Constant(0.9));
  const Value beta2 = *g.AddInput("beta2", scalar, Initializer::Constant(0.95));
  const Value eps = *g.AddInput("eps", scalar, Initializer::Constant(1e-8));
  const Value wd = *g.AddInput("wd", scalar, Initializer::Constant(0.1));
  const Value no_wd = *g.AddConstant("wd.none", scalar, Initializer::Zeros());
  // Small enough that the gradients are clipped.
  const Value max_norm = *g.AddInput("max_norm", scalar, Initializer::Constant(0.5));
  const Value check = scaled ? *g.AddInput("check", {Shape{2}}, Initializer::Zeros()) : Value{};
  std::vector<Value> gradients;
  for (int t = 0; t < tensors; ++t) {
    Value gradient = per_tensor[t][1];
    if (widening_casts && GradientTypeOf(t) != DType::kFloat32) {
      ASSIGN_OR_RETURN(gradient,
                       g.AddOp1(ops::CastOp(), "t" + std::to_string(t) + ".g.to_f32", {gradient},
                                {{"dtype", ops::DTypeAttr(DType::kFloat32)}}));
    }
    gradients.push_back(gradient);
  }
  Attrs scaling;
  if (scaled) scaling["loss_scaled"] = true;
  std::vector<Value> norm_inputs = gradients;
  if (scaled) norm_inputs.push_back(check);
  ASSIGN_OR_RETURN(s.partials,
                   g.AddOp1(ops::GradSumSquaresOp(), "grad_norm.partials", norm_inputs, scaling));
  std::vector<Value> inputs;
  for (int t = 0; t < tensors; ++t) {
    inputs.insert(inputs.end(), {per_tensor[t][0], gradients[t], per_tensor[t][2], per_tensor[t][3],
                                 t % 4 == 1 ? no_wd : wd});
  }
  inputs.insert(inputs.end(), {lr, step, beta1, beta2, eps, s.partials, max_norm});
  if (scaled) inputs.push_back(check);
  if (copies > 0) {
    // One refresh per copy type (refresh_copies converts to one type), each tensor's own in turn.
    const Value stale = *g.AddState("stale", {Shape{}, DType::kInt32}, Initializer::Constant(1));
    for (DType to : {DType::kBFloat16, DType::kFloat16}) {
      std::vector<Value> weights, copied;
      for (int t = 0; t < copies; ++t) {
        const DType type = t % 2 == 0 ? DType::kBFloat16 : DType::kFloat16;
        if (type != to) continue;
        weights.push_back(per_tensor[t][0]);
        copied.push_back(*g.AddState("t" + std::to_string(t) + ".copy", {GradientStepShape(t), to},
                                     Initializer::Uniform(-1, 1)));
        s.state.push_back("t" + std::to_string(t) + ".copy");
      }
      if (weights.empty()) continue;
      std::vector<Value> refresh = weights;
      refresh.insert(refresh.end(), copied.begin(), copied.end());
      refresh.push_back(stale);
      RETURN_IF_ERROR(g.AddOp(ops::RefreshCopiesOp(), "refresh." + std::string(DTypeName(to)),
                              refresh, {{"dtype", ops::DTypeAttr(to)}})
                          .status());
    }
    for (int t = 0; t < copies; ++t) {
      ASSIGN_OR_RETURN(const int32_t copy, g.FindNode("t" + std::to_string(t) + ".copy"));
      inputs.push_back(Value{copy, 0});
    }
    inputs.push_back(stale);
    s.state.push_back("stale");
  }
  // A warm-up schedule (no cosine: its double cosine may differ in the last bit between host and
  // device), so that the kernels give the reference's bits exactly.
  Attrs attrs = {{"tensors", int64_t{tensors}},
                 {"decoupled", true},
                 {"clip_norm", true},
                 {"warmup_steps", int64_t{10}},
                 {"decay", std::string("constant")}};
  if (scaled) attrs["loss_scaled"] = true;
  if (copies > 0) attrs["copies"] = int64_t{copies};
  RETURN_IF_ERROR(g.AddOp(ops::AdamMultiOp(), "adam.all", inputs, attrs).status());
  return s;
}

// The bits of the executor's copies "t<i>.copy", i < copies.
inline std::vector<std::vector<uint16_t>> CopyBits(ir::ReferenceExecutor& cpu, int copies) {
  std::vector<std::vector<uint16_t>> bits;
  for (int t = 0; t < copies; ++t) {
    auto copy = (*cpu.Leaf("t" + std::to_string(t) + ".copy"))->data<uint16_t>();
    bits.emplace_back(copy.begin(), copy.end());
  }
  return bits;
}

// After an update with copies: each copy "t<i>.copy" holds its weight "t<i>" rounded as a cast
// rounds it, or, where the step was `skipped`, the bits it had `before`; the flag "stale" is 0.
inline void ExpectCopiesHoldTheRoundedWeights(ir::ReferenceExecutor& cpu, int copies,
                                              const std::vector<std::vector<uint16_t>>& before,
                                              bool skipped) {
  EXPECT_EQ((*cpu.Leaf("stale"))->data<int32_t>()[0], 0);
  const std::vector<std::vector<uint16_t>> after = CopyBits(cpu, copies);
  for (int t = 0; t < copies; ++t) {
    const ir::HostTensor& w = **cpu.Leaf("t" + std::to_string(t));
    const ir::HostTensor& copy = **cpu.Leaf("t" + std::to_string(t) + ".copy");
    ir::HostTensor rounded(copy.spec());
    ASSERT_TRUE(ir::ConvertFloats(w, rounded).ok());
    auto bits = rounded.data<uint16_t>();
    EXPECT_EQ(after[t], skipped ? before[t] : std::vector<uint16_t>(bits.begin(), bits.end()))
        << "t" << t;
  }
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_SIXTEEN_BIT_GRADIENT_STEP_H_
