// sgd_momentum: PyTorch's SGD with momentum and weight decay, optionally Nesterov's momentum, a
// global clip coefficient and loss scaling's unscale-or-skip check, updating w and v in place;
// sgd_momentum_multi: many tensors at once.
#include <algorithm>

#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kPerTensor = 3;  // w, g, v
// lr, momentum, weight_decay and, when clipping, the clip coefficient, and, when loss-scaled, the
// check (OptionalSharedInputs).
constexpr int kMinShared = 3, kMaxShared = 5;

absl::StatusOr<OptionalShared> Optional(const Attrs& attrs, size_t num_inputs) {
  return OptionalSharedInputs(attrs, kPerTensor, static_cast<int>(num_inputs) - kPerTensor,
                              kMinShared);
}

// `wide_gradient`: the gradient may also be a 16-bit float of the weight's shape, which the
// multi-tensor kernels widen exactly on load (the fuse pass folds a gradient's widening cast in).
absl::StatusOr<std::vector<TensorSpec>> InferSgdOf(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in,
                                                   bool wide_gradient) {
  ASSIGN_OR_RETURN(const OptionalShared optional, Optional(attrs, in.size()));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "weight"));
  const bool gradient_ok = in[1] == in[0] || (wide_gradient && IsLowPrecision(in[1].dtype) &&
                                              in[1].shape == in[0].shape);
  if (!gradient_ok || !(in[2] == in[0])) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", in[0].ToString(), ", gradient ",
                                                   in[1].ToString(), " and velocity ",
                                                   in[2].ToString(), " must match"));
  }
  if (optional.check >= 0) RETURN_IF_ERROR(CheckLossScaleCheck(in[kPerTensor + optional.check]));
  for (size_t i = 3; i < in.size(); ++i) {
    if (static_cast<int>(i) == kPerTensor + optional.check) continue;
    if (in[i].shape.rank() != 0 || in[i].dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameter ", i, " must be an f32 scalar, got ", in[i].ToString()));
    }
  }
  return std::vector<TensorSpec>{};
}

absl::StatusOr<std::vector<TensorSpec>> InferSgd(const Attrs& attrs,
                                                 absl::Span<const TensorSpec> in) {
  return InferSgdOf(attrs, in, /*wide_gradient=*/false);
}

absl::StatusOr<std::vector<TensorSpec>> InferSgdWideGradient(const Attrs& attrs,
                                                             absl::Span<const TensorSpec> in) {
  return InferSgdOf(attrs, in, /*wide_gradient=*/true);
}

absl::Status CpuSgd(const Node& node, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const>) {
  const bool nesterov = ir::BoolAttrOr(node.attrs, "nesterov", false);
  ASSIGN_OR_RETURN(const OptionalShared optional, Optional(node.attrs, in.size()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto w = in[0]->data<T>(), g = in[1]->data<T>(), v = in[2]->data<T>();
    const T lr = in[3]->data<T>()[0], mu = in[4]->data<T>()[0], wd = in[5]->data<T>()[0];
    const T clip = optional.clip >= 0 ? in[kPerTensor + optional.clip]->data<T>()[0] : T(1);
    T unscale = T(1);
    if (optional.check >= 0) {
      auto check = in[kPerTensor + optional.check]->data<T>();
      if (check[1] != T(0)) return absl::OkStatus();  // A non-finite gradient: skipped.
      unscale = check[0];
    }
    for (size_t i = 0; i < w.size(); ++i) {
      // Separate roundings, no fused multiply-add: the kernels compute the same bits.
      const T grad = clip * (unscale * g[i]) + wd * w[i];
      const T vel = mu * v[i] + grad;
      v[i] = vel;
      const T dir = nesterov ? grad + mu * vel : vel;
      w[i] = w[i] - lr * dir;
    }
    return absl::OkStatus();
  });
}

// Plain SGD keeps its own kernels; Nesterov, clipping or loss scaling take the general ones.
bool Plain(const Node& node, int num_inputs, int tensors) {
  return !ir::BoolAttrOr(node.attrs, "nesterov", false) &&
         num_inputs == kPerTensor * tensors + kMinShared;
}

// The general kernels' optional arguments: clip, loss-scale check (each null when absent) and
// the Nesterov flag. `shared` is the first shared input.
absl::Status AddOptionalArgs(const LoweringContext& ctx, const Node& node, size_t shared,
                             KernelArgs& args) {
  ASSIGN_OR_RETURN(const OptionalShared optional,
                   OptionalSharedInputs(node.attrs, static_cast<int>(shared),
                                        static_cast<int>(ctx.inputs.size() - shared), kMinShared));
  args.Add(optional.clip >= 0 ? ctx.inputs[shared + optional.clip] : nullptr);
  args.Add(optional.check >= 0 ? ctx.inputs[shared + optional.check] : nullptr);
  args.Add(static_cast<int>(ir::BoolAttrOr(node.attrs, "nesterov", false)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgd(const LoweringContext& ctx, const Node& node) {
  const int64_t n = ctx.input_specs[0].NumElements();
  KernelArgs args;
  const bool plain = Plain(node, static_cast<int>(ctx.inputs.size()), 1);
  for (int i = 0; i < 6; ++i) args.Add(ctx.inputs[i]);
  if (!plain) RETURN_IF_ERROR(AddOptionalArgs(ctx, node, kPerTensor, args));
  args.Add(static_cast<long long>(n));
  return NvrtcKernel::Create(ctx, node.name, plain ? codegen::SgdMomentum() : codegen::SgdUpdate(),
                             GridFor(n, 256, *ctx.device), dim3(256), 0, std::move(args));
}

// sgd_momentum_multi: the updates of many tensors, grouped kSgdTableSize to a launch.
absl::StatusOr<int64_t> TensorCount(const Attrs& attrs, int num_inputs) {
  return MultiTensorCount(attrs, num_inputs, kPerTensor, kMinShared, kMaxShared);
}

std::vector<int> MultiMutated(const Attrs& attrs, int) {
  return MultiTensorMutated(attrs, kPerTensor, {0, 2});
}

absl::StatusOr<std::vector<TensorSpec>> InferSgdMulti(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(attrs, static_cast<int>(in.size())));
  return InferEachTensor(attrs, in, tensors, kPerTensor, InferSgdWideGradient);
}

absl::Status CpuSgdMulti(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(node.attrs, static_cast<int>(in.size())));
  return RunEachTensor(node, in, out, tensors, kPerTensor, CpuSgd);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgdMulti(const LoweringContext& ctx,
                                                         const Node& node) {
  static_assert(codegen::kSgdTableSize == codegen::kOptimizerTableSize);
  constexpr int kTable = codegen::kSgdTableSize;
  struct Table {
    void* w[kTable];
    void* g[kTable];
    void* v[kTable];
    long long n[kTable];
  };
  const int num_inputs = static_cast<int>(ctx.inputs.size());
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(node.attrs, num_inputs));
  const bool plain = Plain(node, num_inputs, static_cast<int>(tensors));
  const size_t h = kPerTensor * tensors;
  // One kernel per gradient type: the fuse pass groups updates by it.
  const DType gradient = ctx.input_specs[1].dtype;
  for (int64_t t = 1; t < tensors; ++t) {
    if (ctx.input_specs[kPerTensor * t + 1].dtype != gradient) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", node.name, "': the gradients of one sgd_momentum_multi must share a type, got ",
          DTypeName(gradient), " and ", DTypeName(ctx.input_specs[kPerTensor * t + 1].dtype)));
    }
  }
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < tensors; first += kTable) {
    Table table = {};
    const int count = static_cast<int>(std::min<int64_t>(kTable, tensors - first));
    int64_t largest = 1;
    for (int i = 0; i < count; ++i) {
      const int64_t t = first + i;
      table.w[i] = ctx.inputs[3 * t];
      table.g[i] = ctx.inputs[3 * t + 1];
      table.v[i] = ctx.inputs[3 * t + 2];
      table.n[i] = ctx.input_specs[3 * t].NumElements();
      largest = std::max<int64_t>(largest, table.n[i]);
    }
    KernelArgs args;
    args.AddBytes(&table, sizeof(table));
    args.Add(ctx.inputs[h]).Add(ctx.inputs[h + 1]).Add(ctx.inputs[h + 2]);
    if (!plain) RETURN_IF_ERROR(AddOptionalArgs(ctx, node, h, args));
    dim3 grid = GridFor(largest, 256, *ctx.device);
    grid.y = count;
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name,
                                         plain ? codegen::SgdMomentumMulti(gradient)
                                               : codegen::SgdUpdateMulti(gradient),
                                         grid, dim3(256), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  return Sequence(std::move(parts));
}

}  // namespace

const ir::OpDef& SgdMomentumMultiOp() {
  static const ir::OpDef op{.name = "sgd_momentum_multi",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSgdMulti,
                            .cpu = CpuSgdMulti,
                            .lower = LowerSgdMulti,
                            .mutated_inputs_of = MultiMutated,
                            // The weights are float32; 16-bit gradients are read as they are.
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& SgdMomentumOp() {
  static const ir::OpDef op{.name = "sgd_momentum",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSgd,
                            .cpu = CpuSgd,
                            .lower = LowerSgd,
                            .mutated_inputs = {0, 2}};
  return op;
}

}  // namespace reprise::ops
