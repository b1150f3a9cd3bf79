// sgd_momentum: PyTorch's SGD with momentum and weight decay, updating w and v in place.
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferSgd(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 6));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "weight"));
  if (!(in[1] == in[0]) || !(in[2] == in[0])) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", in[0].ToString(), ", gradient ",
                                                   in[1].ToString(), " and velocity ",
                                                   in[2].ToString(), " must match"));
  }
  for (int i = 3; i < 6; ++i) {
    if (in[i].shape.rank() != 0 || in[i].dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameter ", i, " must be an f32 scalar, got ", in[i].ToString()));
    }
  }
  return std::vector<TensorSpec>{};
}

absl::Status CpuSgd(const Node&, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const>) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto w = in[0]->data<T>(), g = in[1]->data<T>(), v = in[2]->data<T>();
    const T lr = in[3]->data<T>()[0], mu = in[4]->data<T>()[0], wd = in[5]->data<T>()[0];
    for (size_t i = 0; i < w.size(); ++i) {
      // Separate roundings, no fused multiply-add: the kernel computes the same bits.
      const T grad = g[i] + wd * w[i];
      const T vel = mu * v[i] + grad;
      v[i] = vel;
      w[i] = w[i] - lr * vel;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgd(const LoweringContext& ctx, const Node& node) {
  const int64_t n = ctx.input_specs[0].NumElements();
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  args.Add(static_cast<long long>(n));
  return NvrtcKernel::Create(ctx, node.name, codegen::SgdMomentum(), GridFor(n, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

}  // namespace

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
