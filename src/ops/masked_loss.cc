#include "src/ops/masked_loss.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "src/codegen/masked_loss_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> Infer(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in));
  return std::vector<TensorSpec>{{Shape{}, in[0].dtype}};
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in));
  if (in[2].shape.rank() != 0 || in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("dloss must be a scalar of the logits' dtype, got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> Grad(Graph& g, const Node& node, absl::Span<const Value> dout,
                                        const std::vector<bool>& needs) {
  std::vector<Value> grads(2);  // Labels get none.
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0],
                     g.AddOp1(MaskedSoftmaxCrossEntropyGradOp(), absl::StrCat(node.name, ".grad"),
                              {node.inputs[0], node.inputs[1], dout[0]}));
  }
  return grads;
}

// Calls fn(row, its logits, max, Σ exp(z - max), label) for every unpadded row; returns how many.
template <typename T>
absl::StatusOr<int64_t> ForEachCountedRow(
    const ir::HostTensor& z, const ir::HostTensor& labels,
    const std::function<void(int64_t, const T*, T, T, int)>& fn) {
  const int64_t rows = z.spec().shape.dim(0), cols = z.spec().shape.dim(1);
  auto zs = z.data<T>();
  auto ls = labels.data<int32_t>();
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (ls[r] == kPaddingLabel) continue;
    if (ls[r] < 0 || ls[r] >= cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", ls[r], " of row ", r, " is outside [0, ", cols,
                       ") and is not the padding label ", kPaddingLabel));
    }
    const T* zr = zs.data() + r * cols;
    T m = zr[0];
    for (int64_t c = 1; c < cols; ++c) m = std::max(m, zr[c]);
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(zr[c] - m);
    fn(r, zr, m, s, ls[r]);
    ++counted;
  }
  return counted;
}

absl::Status Cpu(const Node&, absl::Span<ir::HostTensor* const> in,
                 absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() -> absl::Status {
    T total = 0;
    ASSIGN_OR_RETURN(
        const int64_t counted,
        ForEachCountedRow<T>(*in[0], *in[1], [&](int64_t, const T* zr, T m, T s, int label) {
          total += std::log(s) + m - zr[label];
        }));
    out[0]->data<T>()[0] = total / static_cast<T>(std::max<int64_t>(counted, 1));
    return absl::OkStatus();
  });
}

absl::Status CpuGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() -> absl::Status {
    const int64_t cols = in[0]->spec().shape.dim(1);
    auto dz = out[0]->data<T>();
    std::fill(dz.begin(), dz.end(), T(0));
    // Count first: the scale divides by the unpadded rows.
    ASSIGN_OR_RETURN(const int64_t counted,
                     ForEachCountedRow<T>(*in[0], *in[1], [](int64_t, const T*, T, T, int) {}));
    const T scale = in[2]->data<T>()[0] / static_cast<T>(std::max<int64_t>(counted, 1));
    return ForEachCountedRow<T>(*in[0], *in[1],
                                [&](int64_t r, const T* zr, T m, T s, int label) {
                                  for (int64_t c = 0; c < cols; ++c) {
                                    dz[r * cols + c] = scale * (std::exp(zr[c] - m) / s -
                                                                (c == label ? T(1) : T(0)));
                                  }
                                })
        .status();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node) {
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(rows).Add(cols);
  return NvrtcKernel::Create(ctx, node.name, codegen::MaskedSoftmaxCrossEntropy(), dim3(1),
                             dim3(codegen::kMaskedLossThreads), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGrad(const LoweringContext& ctx, const Node& node) {
  const int rows = static_cast<int>(ctx.input_specs[0].shape.dim(0));
  const int cols = static_cast<int>(ctx.input_specs[0].shape.dim(1));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.outputs[0]);
  args.Add(rows).Add(cols);
  return NvrtcKernel::Create(ctx, node.name, codegen::MaskedSoftmaxCrossEntropyGrad(), dim3(rows),
                             dim3(codegen::kMaskedLossThreads), 0, std::move(args));
}

}  // namespace

const ir::OpDef& MaskedSoftmaxCrossEntropyOp() {
  static const ir::OpDef op{.name = "masked_softmax_cross_entropy",
                            .kind = ir::OpKind::kReduction,
                            .infer = Infer,
                            .grad = Grad,
                            .cpu = Cpu,
                            .lower = Lower};
  return op;
}

const ir::OpDef& MaskedSoftmaxCrossEntropyGradOp() {
  static const ir::OpDef op{.name = "masked_softmax_cross_entropy_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerGrad};
  return op;
}

}  // namespace reprise::ops
