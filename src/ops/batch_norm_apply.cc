// batch_norm_apply: shape rule, CPU reference (batch_norm_train's per-element formula) and GPU
// lowering (the batch-norm kernels' apply, src/ops/batch_norm_nhwc.h, in either layout);
// batch_norm_apply_chain: its steps chained in one launch.
#include "src/ops/batch_norm_apply.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

bool HasResidual(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "residual", false); }
bool HasRelu(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "relu", false); }

absl::StatusOr<std::vector<TensorSpec>> InferApply(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, HasResidual(attrs) ? 6 : 5));
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(attrs));
  ASSIGN_OR_RETURN(const ImageDims x, ImageDimsOf(in[0], layout, "x"));
  const char* names[] = {"gamma", "beta", "saved_mean", "saved_invstd"};
  for (int i = 1; i < 5; ++i) {
    // Mixed precision keeps the per-channel tensors float32 beside 16-bit data.
    const bool dtype_fits = in[i].dtype == in[0].dtype ||
                            (IsLowPrecision(in[0].dtype) && in[i].dtype == DType::kFloat32);
    if (in[i].shape.rank() != 1 || in[i].shape.dim(0) != x.c || !dtype_fits) {
      return absl::InvalidArgumentError(
          absl::StrCat(names[i - 1], " must be ", TensorSpec{Shape{x.c}, in[0].dtype}.ToString(),
                       " (one value per channel of x ", in[0].ToString(), " in ",
                       LayoutName(layout), "), got ", in[i].ToString()));
    }
  }
  if (HasResidual(attrs) && !(in[5] == in[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual ", in[5].ToString(), " must match x ", in[0].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::Status CpuApply(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims d, ImageDimsOf(in[0]->spec(), layout, "x"));
  const bool residual = HasResidual(node.attrs), relu = HasRelu(node.attrs);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), gamma = in[1]->data<T>(), beta = in[2]->data<T>();
    absl::Span<const T> mean = in[3]->data<T>(), invstd = in[4]->data<T>();
    auto y = out[0]->data<T>();
    // Element i of the stored tensor is in channel (i / inner) % C, whatever the layout.
    const int64_t inner = layout == Layout::kNCHW ? d.h * d.w : 1;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      const int64_t c = (i / inner) % d.c;
      T v = BatchNormOutput(x[i], mean[c], invstd[c], gamma[c], beta[c]);
      if (residual) v = v + in[5]->data<T>()[i];    // As the add op rounds.
      if (relu) v = v > T(0) || v != v ? v : T(0);  // As the relu op does: NaN stays NaN.
      y[i] = v;
    }
    return absl::OkStatus();
  });
}

// Both layouts run the forward's own apply code (batch_norm_nhwc.h), float32 or bfloat16, so a
// recomputed output has the forward's bits.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerApply(const LoweringContext& ctx,
                                                      const Node& node) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims d, ImageDimsOf(ctx.input_specs[0], layout, "x"));
  const bool residual = HasResidual(node.attrs);
  ASSIGN_OR_RETURN(const DType dtype, residual ? NhwcDataType(node, ctx.input_specs, {0, 5})
                                               : NhwcDataType(node, ctx.input_specs, {0}));
  return LowerNhwcBatchNormRecompute(ctx, node.name,
                                     {.x = ctx.inputs[0],
                                      .gamma = static_cast<const float*>(ctx.inputs[1]),
                                      .beta = static_cast<const float*>(ctx.inputs[2]),
                                      .saved_mean = static_cast<const float*>(ctx.inputs[3]),
                                      .saved_invstd = static_cast<const float*>(ctx.inputs[4]),
                                      .residual = residual ? ctx.inputs[5] : nullptr,
                                      .y = ctx.outputs[0],
                                      .rows = d.n * d.h * d.w,
                                      .channels = d.c,
                                      .plane = layout == Layout::kNCHW ? d.h * d.w : 0,
                                      .relu = HasRelu(node.attrs),
                                      .dtype = dtype});
}

// batch_norm_apply_chain ------------------------------------------------------------------------

constexpr int kInputsPerStep = 5;  // x, gamma, beta, saved_mean, saved_invstd.

Attrs StepAttrs(const Attrs& chain, bool later) {
  Attrs attrs = chain;
  attrs["residual"] = later;
  attrs["relu"] = later;
  return attrs;
}

absl::StatusOr<int64_t> ChainSteps(absl::Span<const TensorSpec> in) {
  const int64_t steps = static_cast<int64_t>(in.size()) / kInputsPerStep;
  if (in.size() % kInputsPerStep != 0 || steps < 2 || steps > codegen::kBatchNormChainMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_norm_apply_chain takes 2 to ", codegen::kBatchNormChainMaxSteps,
                     " steps of 5 inputs (x, gamma, beta, saved_mean, saved_invstd), got ",
                     in.size(), " inputs"));
  }
  return steps;
}

absl::StatusOr<std::vector<TensorSpec>> InferChain(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const int64_t steps, ChainSteps(in));
  std::vector<TensorSpec> out;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<TensorSpec> step(in.begin() + s * kInputsPerStep,
                                 in.begin() + (s + 1) * kInputsPerStep);
    if (!(step[0] == in[0])) {
      return absl::InvalidArgumentError(absl::StrCat("step ", s, "'s x ", step[0].ToString(),
                                                     " must match step 0's ", in[0].ToString()));
    }
    if (s > 0) step.push_back(in[0]);  // The previous step's value, of x's spec.
    absl::StatusOr<std::vector<TensorSpec>> checked = InferApply(StepAttrs(attrs, s > 0), step);
    if (!checked.ok()) {
      return absl::Status(checked.status().code(),
                          absl::StrCat("step ", s, ": ", checked.status().message()));
    }
    if (s > 0) out.push_back(in[0]);
  }
  return out;
}

// Step by step through batch_norm_apply's reference: the separate ops' bits.
absl::Status CpuChain(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  const int64_t steps = static_cast<int64_t>(in.size()) / kInputsPerStep;
  ir::HostTensor first(in[0]->spec());
  ir::HostTensor* previous = &first;
  for (int64_t s = 0; s < steps; ++s) {
    Node step;
    step.attrs = StepAttrs(node.attrs, s > 0);
    std::vector<ir::HostTensor*> step_in(in.begin() + s * kInputsPerStep,
                                         in.begin() + (s + 1) * kInputsPerStep);
    if (s > 0) step_in.push_back(previous);
    ir::HostTensor* y = s == 0 ? &first : out[s - 1];
    RETURN_IF_ERROR(CpuApply(step, absl::MakeSpan(step_in), absl::MakeSpan(&y, 1)));
    previous = y;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerChain(const LoweringContext& ctx,
                                                      const Node& node) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims d, ImageDimsOf(ctx.input_specs[0], layout, "x"));
  const int64_t steps = static_cast<int64_t>(ctx.inputs.size()) / kInputsPerStep;
  std::vector<int> data_inputs;
  for (int64_t s = 0; s < steps; ++s) data_inputs.push_back(static_cast<int>(s * kInputsPerStep));
  ASSIGN_OR_RETURN(const DType dtype, NhwcDataType(node, ctx.input_specs, data_inputs));
  NhwcBatchNormChain chain{.rows = d.n * d.h * d.w,
                           .channels = d.c,
                           .plane = layout == Layout::kNCHW ? d.h * d.w : 0,
                           .dtype = dtype};
  for (int64_t s = 0; s < steps; ++s) {
    const auto input = [&](int i) { return ctx.inputs[s * kInputsPerStep + i]; };
    chain.steps.push_back({.x = input(0),
                           .gamma = static_cast<const float*>(input(1)),
                           .beta = static_cast<const float*>(input(2)),
                           .saved_mean = static_cast<const float*>(input(3)),
                           .saved_invstd = static_cast<const float*>(input(4)),
                           .y = s == 0 ? nullptr : ctx.outputs[s - 1]});
  }
  return LowerNhwcBatchNormChain(ctx, node.name, chain);
}

}  // namespace

const ir::OpDef& BatchNormApplyOp() {
  static const ir::OpDef op{.name = "batch_norm_apply",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferApply,
                            .cpu = CpuApply,
                            .lower = LowerApply,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchNormApplyChainOp() {
  static const ir::OpDef op{.name = "batch_norm_apply_chain",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferChain,
                            .cpu = CpuChain,
                            .lower = LowerChain,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
