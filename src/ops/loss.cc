// softmax_cross_entropy: mean over the batch of -log softmax(logits)[label], and its gradient.
// Logits are float32 or 16-bit (read as they are, without a float32 copy); the loss is float32
// beside 16-bit logits and the gradient has the logits' dtype. The attribute "classes"
// (loss_checks.h) leaves the logits' last columns out: a vocabulary padded for aligned products.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/loss_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/loss_rows.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// The loss (and dloss) are float32 beside 16-bit logits: the log-sum-exp is accumulated in float
// and a 16-bit loss would round away what training reads from it.
DType LossDType(DType logits) { return IsLowPrecision(logits) ? DType::kFloat32 : logits; }

absl::StatusOr<std::vector<TensorSpec>> InferXent(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in));
  RETURN_IF_ERROR(LossClasses(attrs, in[0]).status());
  return std::vector<TensorSpec>{{Shape{}, LossDType(in[0].dtype)}};
}

absl::StatusOr<std::vector<TensorSpec>> InferXentGrad(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in));
  RETURN_IF_ERROR(LossClasses(attrs, in[0]).status());
  if (in[2].shape.rank() != 0 || in[2].dtype != LossDType(in[0].dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("dloss must be a scalar ",
                                                   DTypeName(LossDType(in[0].dtype)),
                                                   " (the loss's dtype), got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradXent(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  std::vector<Value> grads(2);  // Labels get none.
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0],
                     g.AddOp1(SoftmaxCrossEntropyGradOp(), absl::StrCat(node.name, ".grad"),
                              {node.inputs[0], node.inputs[1], dout[0]}, node.attrs));
  }
  return grads;
}

// Per row, over its first `classes` columns: m = max z, s = Σ exp(z - m); loss_r = log s + m -
// z[label].
template <typename T>
absl::Status ForEachRow(const ir::HostTensor& z, const ir::HostTensor& labels, int64_t classes,
                        const std::function<void(int64_t, const T*, T, T, int)>& fn) {
  const int64_t rows = z.spec().shape.dim(0), cols = z.spec().shape.dim(1);
  auto zs = z.data<T>();
  auto ls = labels.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    if (ls[r] < 0 || ls[r] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", ls[r], " of row ", r, " is outside [0, ", classes, ")"));
    }
    const T* zr = zs.data() + r * cols;
    T m = zr[0];
    for (int64_t c = 1; c < classes; ++c) m = std::max(m, zr[c]);
    T s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(zr[c] - m);
    fn(r, zr, m, s, ls[r]);
  }
  return absl::OkStatus();
}

absl::Status CpuXent(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, in[0]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    T total = 0;
    RETURN_IF_ERROR(ForEachRow<T>(
        *in[0], *in[1], classes,
        [&](int64_t, const T* zr, T m, T s, int label) { total += std::log(s) + m - zr[label]; }));
    out[0]->data<T>()[0] = total / static_cast<T>(in[0]->spec().shape.dim(0));
    return absl::OkStatus();
  });
}

// Columns at or beyond the real classes get a gradient of exactly 0.
absl::Status CpuXentGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, in[0]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    const int64_t rows = in[0]->spec().shape.dim(0), cols = in[0]->spec().shape.dim(1);
    const T scale = in[2]->data<T>()[0] / static_cast<T>(rows);
    auto dz = out[0]->data<T>();
    return ForEachRow<T>(*in[0], *in[1], classes, [&](int64_t r, const T* zr, T m, T s, int label) {
      for (int64_t c = 0; c < cols; ++c) {
        dz[r * cols + c] =
            c < classes ? scale * (std::exp(zr[c] - m) / s - (c == label ? T(1) : T(0))) : T(0);
      }
    });
  });
}

// Shared memory of the one-block loss kernels: one float per row, at most the default 48 KiB.
absl::StatusOr<unsigned> RowLossBytes(int rows, const Node& node) {
  const unsigned shared = static_cast<unsigned>(rows) * sizeof(float);
  if (shared > 48 * 1024) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name, "': batch ", rows,
                                                 " exceeds the loss kernel's limit of 12288 rows"));
  }
  return shared;
}

// Whether `ctx`'s logits take the row-per-block kernels (src/codegen/loss_kernels.h): the only
// ones that leave padding columns out.
absl::StatusOr<bool> RowPerBlock(const LoweringContext& ctx, const Node& node) {
  const TensorSpec& z = ctx.input_specs[0];
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, z));
  return classes < z.shape.dim(1) ||
         codegen::UseRowPerBlockLoss(z.shape.dim(0), z.shape.dim(1), z.dtype);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXent(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const bool row_per_block, RowPerBlock(ctx, node));
  if (row_per_block) return LowerRowPerBlockLoss(ctx, node, codegen::XentOutputs::kLoss);
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  ASSIGN_OR_RETURN(const unsigned shared, RowLossBytes(rows, node));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(rows).Add(cols);
  return NvrtcKernel::Create(ctx, node.name, codegen::SoftmaxCrossEntropy(), dim3(1), dim3(512),
                             shared, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  ASSIGN_OR_RETURN(const bool row_per_block, RowPerBlock(ctx, node));
  if (row_per_block) return LowerRowPerBlockLoss(ctx, node, codegen::XentOutputs::kGradient);
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.outputs[0]);
  args.Add(rows).Add(cols);
  const int warps_per_block = 8;
  return NvrtcKernel::Create(ctx, node.name, codegen::SoftmaxCrossEntropyGrad(),
                             dim3((rows + warps_per_block - 1) / warps_per_block),
                             dim3(32 * warps_per_block), 0, std::move(args));
}

// softmax_cross_entropy_with_grad: (z, labels, dloss) -> (loss, dz), the fused pair.
absl::StatusOr<std::vector<TensorSpec>> InferXentWithGrad(const Attrs& attrs,
                                                          absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(std::vector<TensorSpec> grad, InferXentGrad(attrs, in));
  return std::vector<TensorSpec>{{Shape{}, LossDType(in[0].dtype)}, grad[0]};
}

absl::Status CpuXentWithGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                             absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(CpuXent(node, in.subspan(0, 2), out.subspan(0, 1)));
  return CpuXentGrad(node, in, out.subspan(1, 1));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentWithGrad(const LoweringContext& ctx,
                                                             const Node& node) {
  ASSIGN_OR_RETURN(const bool row_per_block, RowPerBlock(ctx, node));
  if (row_per_block) {
    return LowerRowPerBlockLoss(ctx, node, codegen::XentOutputs::kLossAndGradient);
  }
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  ASSIGN_OR_RETURN(const unsigned shared, RowLossBytes(rows, node));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]);
  args.Add(ctx.outputs[0]).Add(ctx.outputs[1]).Add(rows).Add(cols);
  return NvrtcKernel::Create(ctx, node.name, codegen::SoftmaxCrossEntropyWithGrad(), dim3(1),
                             dim3(512), shared, std::move(args));
}

}  // namespace

const ir::OpDef& SoftmaxCrossEntropyWithGradOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy_with_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentWithGrad,
                            .cpu = CpuXentWithGrad,
                            .lower = LowerXentWithGrad,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& SoftmaxCrossEntropyOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXent,
                            .grad = GradXent,
                            .cpu = CpuXent,
                            .lower = LowerXent,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& SoftmaxCrossEntropyGradOp() {
  static const ir::OpDef op{.name = "softmax_cross_entropy_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentGrad,
                            .cpu = CpuXentGrad,
                            .lower = LowerXentGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
