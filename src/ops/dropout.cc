// dropout, dropout_grad and advance_step: counter-based (Philox) dropout whose masks depend on a
// device-side step counter, so every replay of a captured step draws new masks with no host work,
// and the same seed and step give the same masks on the GPU and on the CPU reference.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/codegen/random_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

struct DropoutParams {
  uint32_t key_lo = 0, key_hi = 0;
  uint32_t threshold = 0;  // Drop when the 24-bit draw is below it.
  float scale = 1;         // 1 / (1 - rate), as float.
};

absl::StatusOr<DropoutParams> ParamsOf(const Attrs& attrs) {
  ASSIGN_OR_RETURN(double rate, ir::FloatAttr(attrs, "rate"));
  ASSIGN_OR_RETURN(int64_t seed, ir::IntAttr(attrs, "seed"));
  ASSIGN_OR_RETURN(int64_t stream, ir::IntAttr(attrs, "stream"));
  if (!(rate >= 0 && rate < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("dropout rate must be in [0, 1), got ", rate));
  }
  DropoutParams p;
  p.key_lo = static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(stream);
  p.key_hi = static_cast<uint32_t>(static_cast<uint64_t>(seed) >> 32);
  p.threshold = static_cast<uint32_t>(std::floor(rate * 16777216.0));
  p.scale = static_cast<float>(1.0 / (1.0 - rate));
  return p;
}

absl::Status CheckStep(const TensorSpec& step) {
  if (step.dtype != DType::kInt32 || step.shape.rank() != 1 || step.shape.dim(0) != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the step counter must be i32[2], got ", step.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferDropout(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  RETURN_IF_ERROR(CheckStep(in[1]));
  RETURN_IF_ERROR(ParamsOf(attrs).status());
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradDropout(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  std::vector<Value> grads(2);
  if (needs[0]) {
    // The same mask, drawn again from the same counter: nothing is stored between the passes.
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(DropoutGradOp(), absl::StrCat(node.name, ".grad"),
                                        {dout[0], node.inputs[1]}, node.attrs));
  }
  return grads;
}

absl::Status CpuDropout(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(DropoutParams p, ParamsOf(node.attrs));
  auto step_words = in[1]->data<int32_t>();
  const uint64_t step = static_cast<uint32_t>(step_words[0]) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(step_words[1])) << 32);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>();
    auto y = out[0]->data<T>();
    for (size_t i = 0; i < x.size(); ++i) {
      const bool drop = codegen::DropoutDrops(i, step, p.key_lo, p.key_hi, p.threshold);
      y[i] = drop ? T(0) : x[i] * static_cast<T>(p.scale);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerDropout(const LoweringContext& ctx,
                                                        const Node& node) {
  ASSIGN_OR_RETURN(DropoutParams p, ParamsOf(node.attrs));
  RETURN_IF_ERROR(CheckDType(ctx.input_specs[0], DType::kFloat32, "x"));
  const int64_t n = ctx.input_specs[0].NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(static_cast<long long>(n));
  args.Add(p.key_lo).Add(p.key_hi).Add(p.threshold).Add(p.scale);
  return NvrtcKernel::Create(ctx, node.name, codegen::Dropout(), GridFor(n, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

// advance_step -------------------------------------------------------------------------------

// (step[, check]): with loss scaling's check, a skipped update leaves the counter as it was.
absl::StatusOr<std::vector<TensorSpec>> InferAdvance(const Attrs&,
                                                     absl::Span<const TensorSpec> in) {
  if (in.size() != 1 && in.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected the step counter and optionally the loss-scale check, got ",
                     in.size(), " inputs"));
  }
  RETURN_IF_ERROR(CheckStep(in[0]));
  if (in.size() == 2) RETURN_IF_ERROR(CheckLossScaleCheck(in[1]));
  return std::vector<TensorSpec>{};
}

absl::Status CpuAdvance(const Node&, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const>) {
  if (in.size() == 2 && ir::FloatElement(*in[1], 1) != 0) return absl::OkStatus();
  auto words = in[0]->data<int32_t>();
  const uint32_t lo = static_cast<uint32_t>(words[0]) + 1u;
  words[0] = static_cast<int32_t>(lo);
  if (lo == 0u) words[1] = static_cast<int32_t>(static_cast<uint32_t>(words[1]) + 1u);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdvance(const LoweringContext& ctx,
                                                        const Node& node) {
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs.size() > 1 ? ctx.inputs[1] : nullptr);
  return NvrtcKernel::Create(ctx, node.name, codegen::AdvanceStep(), dim3(1), dim3(1), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& DropoutOp() {
  static const ir::OpDef op{.name = "dropout",
                            .infer = InferDropout,
                            .grad = GradDropout,
                            .cpu = CpuDropout,
                            .lower = LowerDropout};
  return op;
}
const ir::OpDef& DropoutGradOp() {
  // Same arithmetic on dy: kept elements scaled, dropped ones zero.
  static const ir::OpDef op{
      .name = "dropout_grad", .infer = InferDropout, .cpu = CpuDropout, .lower = LowerDropout};
  return op;
}
const ir::OpDef& AdvanceStepOp() {
  static const ir::OpDef op{.name = "advance_step",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferAdvance,
                            .cpu = CpuAdvance,
                            .lower = LowerAdvance,
                            .mutated_inputs = {0}};
  return op;
}

}  // namespace reprise::ops
