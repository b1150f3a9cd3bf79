// adam: torch.optim.Adam and, with attr decoupled, AdamW, updating w, m ("exp_avg") and v
// ("exp_avg_sq") in place, with bias corrections from the device step counter, an optional
// global clip coefficient and loss scaling's optional unscale-or-skip check. (adam_multi, many
// tensors at once, is in adam_multi.cc.)
#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kPerTensor = 4;  // w, g, m, v
// lr, step, beta1, beta2, epsilon, weight_decay and, when clipping, the clip coefficient, and,
// when loss-scaled, the check (OptionalSharedInputs).
constexpr int kMinShared = 6;
constexpr int kStepInput = 1;  // Among the shared inputs.

absl::StatusOr<OptionalShared> Optional(const Attrs& attrs, size_t num_inputs) {
  return OptionalSharedInputs(attrs, kPerTensor, static_cast<int>(num_inputs) - kPerTensor,
                              kMinShared);
}

absl::StatusOr<std::vector<TensorSpec>> InferAdam(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const OptionalShared optional, Optional(attrs, in.size()));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "weight"));
  for (int i = 1; i < kPerTensor; ++i) {
    if (!(in[i] == in[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight ", in[0].ToString(), ", gradient ", in[1].ToString(),
                       " and moments ", in[2].ToString(), ", ", in[3].ToString(), " must match"));
    }
  }
  for (size_t i = kPerTensor; i < in.size(); ++i) {
    if (static_cast<int>(i) == kPerTensor + optional.check) {
      RETURN_IF_ERROR(CheckLossScaleCheck(in[i]));
    } else if (i == kPerTensor + kStepInput) {
      if (in[i].dtype != DType::kInt32 || in[i].shape.rank() != 1 || in[i].shape.dim(0) != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("the step counter must be i32[2], got ", in[i].ToString()));
      }
    } else if (in[i].shape.rank() != 0 || in[i].dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameter ", i, " must be an f32 scalar, got ", in[i].ToString()));
    }
  }
  return std::vector<TensorSpec>{};
}

uint64_t StepOf(const ir::HostTensor& counter) {
  auto words = counter.data<int32_t>();
  return static_cast<uint32_t>(words[0]) |
         (static_cast<uint64_t>(static_cast<uint32_t>(words[1])) << 32);
}

absl::Status CpuAdam(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const>) {
  const bool decoupled = ir::BoolAttrOr(node.attrs, "decoupled", false);
  const uint64_t step = StepOf(*in[kPerTensor + kStepInput]);
  ASSIGN_OR_RETURN(const OptionalShared optional, Optional(node.attrs, in.size()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto w = in[0]->data<T>(), g = in[1]->data<T>(), m = in[2]->data<T>(), v = in[3]->data<T>();
    auto scalar = [&](int i) { return in[kPerTensor + i]->data<T>()[0]; };
    const T lr = scalar(0), b1 = scalar(2), b2 = scalar(3), eps = scalar(4), wd = scalar(5);
    const T clip = optional.clip >= 0 ? scalar(optional.clip) : T(1);
    T unscale = T(1);
    if (optional.check >= 0) {
      auto check = in[kPerTensor + optional.check]->data<T>();
      if (check[1] != T(0)) return absl::OkStatus();  // A non-finite gradient: skipped.
      unscale = check[0];
    }
    const codegen::AdamStep a = codegen::AdamStepOf(lr, b1, b2, wd, decoupled, step);
    const T step_size = static_cast<T>(a.step_size), bc2_sqrt = static_cast<T>(a.bc2_sqrt);
    const T decay = static_cast<T>(a.decay), wd_l2 = decoupled ? T(0) : wd;
    const T omb1 = static_cast<T>(1.0 - static_cast<double>(b1));
    const T omb2 = static_cast<T>(1.0 - static_cast<double>(b2));
    for (size_t i = 0; i < w.size(); ++i) {
      // The kernel's order of operations, each rounded on its own.
      T grad = clip * (unscale * g[i]);
      if (wd_l2 != T(0)) grad = grad + wd_l2 * w[i];
      const T decayed = w[i] * decay;
      const T mm = b1 * m[i] + omb1 * grad;
      const T vv = b2 * v[i] + omb2 * (grad * grad);
      const T denom = std::sqrt(vv) / bc2_sqrt + eps;
      m[i] = mm;
      v[i] = vv;
      w[i] = decayed - step_size * (mm / denom);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdam(const LoweringContext& ctx, const Node& node) {
  const int64_t n = ctx.input_specs[0].NumElements();
  KernelArgs args;
  ASSIGN_OR_RETURN(const OptionalShared optional, Optional(node.attrs, ctx.inputs.size()));
  for (int i = 0; i < kPerTensor + kMinShared; ++i) args.Add(ctx.inputs[i]);
  args.Add(optional.clip >= 0 ? ctx.inputs[kPerTensor + optional.clip] : nullptr);
  args.Add(optional.check >= 0 ? ctx.inputs[kPerTensor + optional.check] : nullptr);
  args.Add(static_cast<int>(ir::BoolAttrOr(node.attrs, "decoupled", false)));
  args.Add(static_cast<long long>(n));
  return NvrtcKernel::Create(ctx, node.name, codegen::Adam(), GridFor(n, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

}  // namespace

const ir::OpDef& AdamOp() {
  static const ir::OpDef op{.name = "adam",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferAdam,
                            .cpu = CpuAdam,
                            .lower = LowerAdam,
                            .mutated_inputs = {0, 2, 3}};
  return op;
}

}  // namespace reprise::ops
