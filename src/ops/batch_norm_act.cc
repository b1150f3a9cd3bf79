#include "src/ops/batch_norm_act.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ir/low_precision.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

bool HasResidual(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "residual", false); }
bool HasMaskedOutput(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "masked_output", false); }
bool ReluFromX(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "relu_from_x", false); }
bool KeepBits(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "keep_bits", false); }
bool ReluFromBits(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "relu_from_bits", false); }
bool DyAddend(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "dy_addend", false); }

// The ReLU's keep bits of channels-last x [N, H, W, C], C % 16 == 0: int32 [N, H, W, C / 16]
// holding a byte per four elements, bit e % 4 of byte e / 4 for element e (upper halves zero).
// Element e's bit in int32 word e / 16 of the keep bits: byte (e / 4) % 4 of the word (little
// endian, as the GPU stores the bytes), bit e % 4 of that byte.
int KeepBitOf(int64_t e) { return static_cast<int>(8 * ((e / 4) % 4) + e % 4); }

absl::Status CheckSameSpec(const TensorSpec& a, const TensorSpec& b, absl::string_view what) {
  if (a == b) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must match x: ", a.ToString(), " vs ", b.ToString()));
}

absl::StatusOr<std::vector<TensorSpec>> InferTrain(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  const size_t arity = HasResidual(attrs) ? 6 : 5;
  if (in.size() != arity) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", arity, " inputs, got ", in.size()));
  }
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, BatchNormTrainOp().infer(attrs, in.subspan(0, 5)));
  if (HasResidual(attrs)) RETURN_IF_ERROR(CheckSameSpec(in[5], in[0], "residual"));
  if (KeepBits(attrs)) {
    ASSIGN_OR_RETURN(TensorSpec bits, BatchNormKeepBitsSpec(attrs, in[0]));
    out.push_back(bits);
  }
  return out;
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, DyAddend(attrs) ? 7 : 6));
  if (DyAddend(attrs)) {
    if (!HasMaskedOutput(attrs)) {
      return absl::InvalidArgumentError(
          "dy_addend needs masked_output: the sum is masked and written as it is loaded, and the "
          "apply pass reads that");
    }
    RETURN_IF_ERROR(CheckSameSpec(in[6], in[0], "dy_addend"));
  }
  if (ReluFromX(attrs) && ReluFromBits(attrs)) {
    return absl::InvalidArgumentError("relu_from_x and relu_from_bits exclude each other");
  }
  if (ReluFromBits(attrs)) {
    ASSIGN_OR_RETURN(const TensorSpec bits, BatchNormKeepBitsSpec(attrs, in[2]));
    if (!(in[1] == bits)) {
      return absl::InvalidArgumentError(absl::StrCat("the keep bits must be ", bits.ToString(),
                                                     " for x ", in[2].ToString(), ", got ",
                                                     in[1].ToString()));
    }
  } else if (ReluFromX(attrs)) {
    if (!(in[1] == in[3])) {
      return absl::InvalidArgumentError(
          absl::StrCat("beta must match gamma: ", in[1].ToString(), " vs ", in[3].ToString()));
    }
  } else {
    RETURN_IF_ERROR(CheckSameSpec(in[1], in[0], "act_out"));
  }
  const std::vector<TensorSpec> bn_in = {in[0], in[2], in[3], in[4], in[5]};
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, BatchNormGradOp().infer(attrs, bn_in));
  if (HasMaskedOutput(attrs)) out.push_back(in[0]);
  return out;
}

// batch_norm_train, then add and relu, each by its own reference.
absl::Status CpuTrain(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ir::HostTensor normalized(out[0]->spec());
  ir::HostTensor* bn_out[] = {&normalized, out[1], out[2]};
  RETURN_IF_ERROR(BatchNormTrainOp().cpu(node, in.subspan(0, 5), absl::MakeSpan(bn_out)));
  const Node stub;
  ir::HostTensor* pre_act = &normalized;
  ir::HostTensor summed(out[0]->spec());
  if (HasResidual(node.attrs)) {
    ir::HostTensor* add_in[] = {&normalized, in[5]};
    ir::HostTensor* add_out[] = {&summed};
    RETURN_IF_ERROR(AddOp().cpu(stub, absl::MakeSpan(add_in), absl::MakeSpan(add_out)));
    pre_act = &summed;
  }
  RETURN_IF_ERROR(ReluOp().cpu(stub, absl::MakeSpan(&pre_act, 1), out.subspan(0, 1)));
  if (KeepBits(node.attrs)) {
    auto words = out[3]->data<int32_t>();
    std::fill(words.begin(), words.end(), 0);
    for (int64_t e = 0; e < out[0]->spec().NumElements(); ++e) {
      if (ir::FloatElement(*out[0], e) > 0) words[e / 16] |= int32_t{1} << KeepBitOf(e);
    }
  }
  return absl::OkStatus();
}

// relu_grad, then batch_norm_grad; with relu_from_x the ReLU's output first, recomputed by
// batch_norm_apply's reference (the forward's bits); with dy_addend, add's reference first.
absl::Status CpuGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  const Node stub;
  ir::HostTensor dy_sum(in[0]->spec());
  ir::HostTensor* dy = in[0];
  if (DyAddend(node.attrs)) {
    ir::HostTensor* add_in[] = {in[0], in[6]};
    ir::HostTensor* add_out[] = {&dy_sum};
    RETURN_IF_ERROR(AddOp().cpu(stub, absl::MakeSpan(add_in), absl::MakeSpan(add_out)));
    // An add node stores its sum in dy's type, and so does the kernel before it masks it.
    RETURN_IF_ERROR(ir::RoundToStored(node.outputs[0].dtype, dy_sum));
    dy = &dy_sum;
  }
  ir::HostTensor masked(in[0]->spec());
  ir::HostTensor* g = HasMaskedOutput(node.attrs) ? out[3] : &masked;
  ir::HostTensor recomputed(in[2]->spec());
  ir::HostTensor* act_out = in[1];
  if (ReluFromBits(node.attrs)) {  // 1 where the bit is set, 0 elsewhere: relu_grad's act > 0.
    auto words = in[1]->data<int32_t>();
    for (int64_t e = 0; e < recomputed.spec().NumElements(); ++e) {
      const bool keep = (static_cast<uint32_t>(words[e / 16]) >> KeepBitOf(e)) & 1u;
      ir::SetFloatElement(recomputed, e, keep ? 1.0 : 0.0);
    }
    act_out = &recomputed;
  } else if (ReluFromX(node.attrs)) {
    Node apply;
    apply.attrs = node.attrs;
    apply.attrs["relu"] = true;
    apply.attrs["residual"] = false;
    ir::HostTensor* apply_in[] = {in[2], in[3], in[1], in[4], in[5]};
    ir::HostTensor* apply_out[] = {&recomputed};
    RETURN_IF_ERROR(
        BatchNormApplyOp().cpu(apply, absl::MakeSpan(apply_in), absl::MakeSpan(apply_out)));
    act_out = &recomputed;
  }
  ir::HostTensor* relu_in[] = {dy, act_out};
  RETURN_IF_ERROR(ReluGradOp().cpu(stub, absl::MakeSpan(relu_in), absl::MakeSpan(&g, 1)));
  ir::HostTensor* bn_in[] = {g, in[2], in[3], in[4], in[5]};
  return BatchNormGradOp().cpu(node, absl::MakeSpan(bn_in), out.subspan(0, 3));
}

// x's extents, its NCHW plane (0 for channels-last) and the element type, after checking the
// types (float32 or bfloat16 data at `data_inputs`, float32 per-channel tensors).
struct KernelData {
  ImageDims x;
  int64_t plane;
  DType dtype;
};
absl::StatusOr<KernelData> KernelDataOf(const LoweringContext& ctx, const Node& node, int x_index,
                                        absl::Span<const int> data_inputs,
                                        absl::Span<const int> other_inputs = {}) {
  ASSIGN_OR_RETURN(Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(const DType dtype,
                   NhwcDataType(node, ctx.input_specs, data_inputs, other_inputs));
  ASSIGN_OR_RETURN(ImageDims x, ImageDimsOf(ctx.input_specs[x_index], layout, "x"));
  return KernelData{x, layout == Layout::kNCHW ? x.h * x.w : 0, dtype};
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerTrain(const LoweringContext& ctx,
                                                      const Node& node) {
  const bool residual = HasResidual(node.attrs);
  ASSIGN_OR_RETURN(const KernelData data,
                   residual ? KernelDataOf(ctx, node, 0, {0, 5}) : KernelDataOf(ctx, node, 0, {0}));
  NhwcBatchNormForward args;
  args.x = ctx.inputs[0];
  args.gamma = static_cast<const float*>(ctx.inputs[1]);
  args.beta = static_cast<const float*>(ctx.inputs[2]);
  args.running_mean = static_cast<float*>(ctx.inputs[3]);
  args.running_var = static_cast<float*>(ctx.inputs[4]);
  if (residual) args.residual = ctx.inputs[5];
  args.y = ctx.outputs[0];
  args.saved_mean = static_cast<float*>(ctx.outputs[1]);
  args.saved_invstd = static_cast<float*>(ctx.outputs[2]);
  args.rows = data.x.n * data.x.h * data.x.w;
  args.channels = data.x.c;
  args.plane = data.plane;
  args.epsilon = node.attrs.contains("epsilon") ? *ir::FloatAttr(node.attrs, "epsilon") : 1e-5;
  args.momentum = node.attrs.contains("momentum") ? *ir::FloatAttr(node.attrs, "momentum") : 0.1;
  args.relu = true;
  args.dtype = data.dtype;
  if (KeepBits(node.attrs)) args.keep_bits = ctx.outputs[3];
  return LowerNhwcBatchNormTrain(ctx, node.name, args);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGrad(const LoweringContext& ctx, const Node& node) {
  // With relu_from_x input 1 is beta, a per-channel float32 tensor, not data.
  std::vector<int> data_inputs = {0, 2};
  if (!ReluFromBits(node.attrs) && !ReluFromX(node.attrs)) data_inputs.push_back(1);
  if (DyAddend(node.attrs)) data_inputs.push_back(6);
  ASSIGN_OR_RETURN(const KernelData data, ReluFromBits(node.attrs)
                                              ? KernelDataOf(ctx, node, 2, data_inputs, {1})
                                              : KernelDataOf(ctx, node, 2, data_inputs));
  NhwcBatchNormBackward args;
  args.dy = ctx.inputs[0];
  if (ReluFromBits(node.attrs)) {
    args.act_bits = ctx.inputs[1];
  } else if (ReluFromX(node.attrs)) {
    args.relu_beta = static_cast<const float*>(ctx.inputs[1]);
  } else {
    args.act_out = ctx.inputs[1];
  }
  args.x = ctx.inputs[2];
  args.gamma = static_cast<const float*>(ctx.inputs[3]);
  args.saved_mean = static_cast<const float*>(ctx.inputs[4]);
  args.saved_invstd = static_cast<const float*>(ctx.inputs[5]);
  args.dx = ctx.outputs[0];
  args.dgamma = static_cast<float*>(ctx.outputs[1]);
  args.dbeta = static_cast<float*>(ctx.outputs[2]);
  if (HasMaskedOutput(node.attrs)) args.masked_dy = ctx.outputs[3];
  if (DyAddend(node.attrs)) args.dy_addend = ctx.inputs[6];
  args.rows = data.x.n * data.x.h * data.x.w;
  args.channels = data.x.c;
  args.plane = data.plane;
  args.dtype = data.dtype;
  return LowerNhwcBatchNormGrad(ctx, node.name, args);
}

}  // namespace

absl::StatusOr<TensorSpec> BatchNormKeepBitsSpec(const Attrs& attrs, const TensorSpec& x) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(attrs));
  if (layout != Layout::kNHWC || x.shape.rank() != 4 || x.shape.dim(3) % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ReLU's keep bits pack 16 channels to an int32: they need channels-last "
                     "data with a multiple of 16 channels, got ",
                     x.ToString(), " in ", LayoutName(layout)));
  }
  return TensorSpec{Shape{x.shape.dim(0), x.shape.dim(1), x.shape.dim(2), x.shape.dim(3) / 16},
                    DType::kInt32};
}

const ir::OpDef& BatchNormActTrainOp() {
  static const ir::OpDef op{.name = "batch_norm_act_train",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferTrain,
                            .cpu = CpuTrain,
                            .lower = LowerTrain,
                            .mutated_inputs = {3, 4},
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchNormActGradOp() {
  static const ir::OpDef op{.name = "batch_norm_act_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
