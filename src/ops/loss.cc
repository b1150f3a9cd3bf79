// softmax_cross_entropy: mean over the batch of -log softmax(logits)[label], and its gradient.
// Logits are float32 or 16-bit (read as they are, without a float32 copy); the loss is float32
// beside 16-bit logits and the gradient has the logits' dtype. The attribute "classes"
// (loss_checks.h) leaves the logits' last columns out: a vocabulary padded for aligned products.
//
// The ensemble forms (batched.h: batched_softmax_cross_entropy and its gradient and fused pair)
// share every rule here with a leading model dimension: logits [K, B, C], labels [K, B], a loss
// per model [K]. On the GPU they take one model's row-per-block kernels (loss_rows.h) over the K·B
// rows, with a mean per model, in float32 and the 16-bit types alike.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/loss_kernels.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/loss_rows.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

using codegen::XentOutputs;

// The loss (and dloss) are float32 beside 16-bit logits: the log-sum-exp is accumulated in float
// and a 16-bit loss would round away what training reads from it.
DType LossDType(DType logits) { return IsLowPrecision(logits) ? DType::kFloat32 : logits; }

// The logits' sizes; `lead` is 1 where they lead with the models (the ensemble ops), else 0.
struct XentDims {
  int lead;
  int64_t models, rows, cols;
};
XentDims DimsOf(const TensorSpec& logits) {
  const int lead = logits.shape.rank() - 2;
  return {lead, lead == 1 ? logits.shape.dim(0) : 1, logits.shape.dim(lead),
          logits.shape.dim(lead + 1)};
}

// The loss: [] for one model, [K] for an ensemble.
TensorSpec LossSpec(const TensorSpec& logits) {
  const XentDims d = DimsOf(logits);
  return {d.lead == 1 ? Shape{d.models} : Shape{}, LossDType(logits.dtype)};
}

template <int kLead>
absl::StatusOr<std::vector<TensorSpec>> InferXent(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in, /*label_rank=*/1 + kLead));
  RETURN_IF_ERROR(LossClasses(attrs, in[0]).status());
  return std::vector<TensorSpec>{LossSpec(in[0])};
}

// (logits, labels, dloss of the loss's spec) -> dlogits.
template <int kLead>
absl::StatusOr<std::vector<TensorSpec>> InferXentGrad(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> loss, InferXent<kLead>(attrs, in.subspan(0, 2)));
  if (!(in[2] == loss[0])) {
    const std::string dtype(DTypeName(loss[0].dtype));
    return absl::InvalidArgumentError(
        absl::StrCat("dloss must be ",
                     kLead == 0 ? absl::StrCat("a scalar ", dtype)
                                : absl::StrCat(loss[0].ToString(), " (one value per model)"),
                     " (the loss's dtype), got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradXent(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  const ir::OpDef& grad_op = node.op == &BatchedSoftmaxCrossEntropyOp()
                                 ? BatchedSoftmaxCrossEntropyGradOp()
                                 : SoftmaxCrossEntropyGradOp();
  std::vector<Value> grads(2);  // Labels get none.
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(grad_op, absl::StrCat(node.name, ".grad"),
                                        {node.inputs[0], node.inputs[1], dout[0]}, node.attrs));
  }
  return grads;
}

// The reference for every model of `z` (one without a leading model dimension): per row, over its
// first `classes` columns, m = max z, s = Σ exp(z - m), the row's loss log s + m - z[label];
// loss[k] (when not null) the mean of model k's; dz (when not null) = dloss[k] / rows ·
// (exp(z - m) / s - [c == label]) and exactly 0 at and beyond `classes`, with dloss[0] for every
// model when `shared_dloss`.
template <typename T>
absl::Status XentReference(const ir::HostTensor& z, const ir::HostTensor& labels, int64_t classes,
                           const T* dloss, bool shared_dloss, T* loss, T* dz) {
  const XentDims d = DimsOf(z.spec());
  auto zs = z.data<T>();
  auto ls = labels.data<int32_t>();
  for (int64_t k = 0; k < d.models; ++k) {
    const T scale = dloss == nullptr ? T(0) : dloss[shared_dloss ? 0 : k] / static_cast<T>(d.rows);
    T total = 0;
    for (int64_t r = 0; r < d.rows; ++r) {
      const int64_t row = k * d.rows + r;
      const int32_t label = ls[row];
      if (label < 0 || label >= classes) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", label, " of ", d.lead == 1 ? absl::StrCat("model ", k, " ") : "",
                         "row ", r, " is outside [0, ", classes, ")"));
      }
      const T* zr = zs.data() + row * d.cols;
      T m = zr[0];
      for (int64_t c = 1; c < classes; ++c) m = std::max(m, zr[c]);
      T s = 0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(zr[c] - m);
      total += std::log(s) + m - zr[label];
      if (dz == nullptr) continue;
      for (int64_t c = 0; c < d.cols; ++c) {
        dz[row * d.cols + c] =
            c < classes ? scale * (std::exp(zr[c] - m) / s - (c == label ? T(1) : T(0))) : T(0);
      }
    }
    if (loss != nullptr) loss[k] = total / static_cast<T>(d.rows);
  }
  return absl::OkStatus();
}

// What `node`, one of the family, writes.
XentOutputs OutputsOf(const Node& node) {
  if (node.op == &SoftmaxCrossEntropyOp() || node.op == &BatchedSoftmaxCrossEntropyOp()) {
    return XentOutputs::kLoss;
  }
  if (node.op == &SoftmaxCrossEntropyGradOp() || node.op == &BatchedSoftmaxCrossEntropyGradOp()) {
    return XentOutputs::kGradient;
  }
  return XentOutputs::kLossAndGradient;
}

// Every op of the family: inputs (logits, labels[, dloss]), outputs (loss[, total], dlogits) as
// it writes them. The ensemble's fused pair takes the gradient of the models' summed loss, dtotal,
// for every model, and sums their losses as model_sum does.
absl::Status CpuXentFamily(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  const XentOutputs outputs = OutputsOf(node);
  const bool stacked = DimsOf(in[0]->spec()).lead == 1;
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, in[0]->spec()));
  RETURN_IF_ERROR(DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    const T* dloss = outputs == XentOutputs::kLoss ? nullptr : in[2]->data<T>().data();
    T* loss = outputs == XentOutputs::kGradient ? nullptr : out[0]->data<T>().data();
    T* dz = outputs == XentOutputs::kLoss ? nullptr : out.back()->data<T>().data();
    return XentReference<T>(*in[0], *in[1], classes, dloss,
                            stacked && outputs == XentOutputs::kLossAndGradient, loss, dz);
  }));
  if (!stacked || outputs != XentOutputs::kLossAndGradient) return absl::OkStatus();
  return ModelSumOp().cpu(Node(), out.subspan(0, 1), out.subspan(1, 1));
}

// One model's one-block float32 kernels (generated_kernel.h, fused_kernels.h): the loss one block
// of 512 threads, the gradient a warp per row. Arguments (z, labels[, dloss], [loss,] [dz,] rows,
// cols).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerOneBlockLoss(const LoweringContext& ctx,
                                                             const Node& node,
                                                             const codegen::GeneratedKernel& kernel,
                                                             XentOutputs outputs) {
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]);
  if (outputs != XentOutputs::kLoss) args.Add(ctx.inputs[2]);
  if (outputs != XentOutputs::kGradient) args.Add(ctx.outputs[0]);
  if (outputs != XentOutputs::kLoss) args.Add(ctx.outputs.back());
  args.Add(rows).Add(cols);
  if (outputs == XentOutputs::kGradient) {
    const int warps_per_block = 8;
    return NvrtcKernel::Create(ctx, node.name, kernel,
                               dim3((rows + warps_per_block - 1) / warps_per_block),
                               dim3(32 * warps_per_block), 0, std::move(args));
  }
  // A float of shared memory per row, at most kOneBlockLossMaxRows of them (UseRowPerBlockLoss).
  return NvrtcKernel::Create(ctx, node.name, kernel, dim3(1), dim3(512),
                             static_cast<unsigned>(rows) * sizeof(float), std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentFamily(const LoweringContext& ctx,
                                                           const Node& node) {
  const XentOutputs outputs = OutputsOf(node);
  const TensorSpec& z = ctx.input_specs[0];
  // The row-per-block kernels (src/codegen/loss_kernels.h) are the only ones that leave padding
  // columns out, and the ensemble's: K·B rows like one model's, a mean per model. They also say
  // which dtypes have no kernel (the one-block kernels are float32's).
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, z));
  if (DimsOf(z).lead == 1 || z.dtype != DType::kFloat32 || classes < z.shape.dim(1) ||
      codegen::UseRowPerBlockLoss(z.shape.dim(0), z.shape.dim(1), z.dtype)) {
    return LowerRowPerBlockLoss(ctx, node, outputs);
  }
  const codegen::GeneratedKernel kernel =
      outputs == XentOutputs::kLoss       ? codegen::SoftmaxCrossEntropy()
      : outputs == XentOutputs::kGradient ? codegen::SoftmaxCrossEntropyGrad()
                                          : codegen::SoftmaxCrossEntropyWithGrad();
  return LowerOneBlockLoss(ctx, node, kernel, outputs);
}

// softmax_cross_entropy_with_grad: (z, labels, dloss) -> (loss, dz), the fused pair.
absl::StatusOr<std::vector<TensorSpec>> InferXentWithGrad(const Attrs& attrs,
                                                          absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(std::vector<TensorSpec> grad, InferXentGrad<0>(attrs, in));
  return std::vector<TensorSpec>{LossSpec(in[0]), grad[0]};
}

// batched_softmax_cross_entropy_with_grad: (z, labels, dtotal []) -> (loss [K], total [], dz).
absl::StatusOr<std::vector<TensorSpec>> InferStackedXentWithGrad(const Attrs& attrs,
                                                                 absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> loss, InferXent<1>(attrs, in.subspan(0, 2)));
  const TensorSpec total{Shape{}, loss[0].dtype};
  if (!(in[2] == total)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtotal must be a scalar ", DTypeName(total.dtype), ", got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{loss[0], total, in[0]};
}

}  // namespace

const ir::OpDef& SoftmaxCrossEntropyOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXent<0>,
                            .grad = GradXent,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& SoftmaxCrossEntropyGradOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentGrad<0>,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& SoftmaxCrossEntropyWithGradOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy_with_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentWithGrad,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchedSoftmaxCrossEntropyOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXent<1>,
                            .grad = GradXent,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchedSoftmaxCrossEntropyGradOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentGrad<1>,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchedSoftmaxCrossEntropyWithGradOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy_with_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferStackedXentWithGrad,
                            .cpu = CpuXentFamily,
                            .lower = LowerXentFamily,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
