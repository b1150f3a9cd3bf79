// lr_schedule: the learning rate of this step, base rate times the schedule's factor at the
// device step counter (src/codegen/optimizer_kernels.h), so a replayed step needs no host work.
#include "src/ops/lr_schedule.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<codegen::ScheduleParams> LrScheduleParams(const Attrs& attrs) {
  codegen::ScheduleParams p;
  auto decay = attrs.find("decay");
  const std::string kind =
      decay == attrs.end() || !std::holds_alternative<std::string>(decay->second)
          ? ""
          : std::get<std::string>(decay->second);
  ASSIGN_OR_RETURN(p.warmup_steps, ir::IntAttr(attrs, "warmup_steps"));
  if (p.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup_steps must be at least 0, got ", p.warmup_steps));
  }
  if (kind == "constant") {
    p.decay = codegen::ScheduleDecay::kConstant;
  } else if (kind == "cosine") {
    p.decay = codegen::ScheduleDecay::kCosine;
    ASSIGN_OR_RETURN(p.total_steps, ir::IntAttr(attrs, "total_steps"));
    ASSIGN_OR_RETURN(p.min_factor, ir::FloatAttr(attrs, "min_factor"));
    if (p.total_steps <= p.warmup_steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "total_steps (", p.total_steps, ") must exceed warmup_steps (", p.warmup_steps, ")"));
    }
    if (!(p.min_factor >= 0 && p.min_factor <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_factor must be in [0, 1], got ", p.min_factor));
    }
  } else if (kind == "step") {
    p.decay = codegen::ScheduleDecay::kStep;
    ASSIGN_OR_RETURN(p.step_size, ir::IntAttr(attrs, "step_size"));
    ASSIGN_OR_RETURN(p.gamma, ir::FloatAttr(attrs, "gamma"));
    if (p.step_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("step_size must be at least 1, got ", p.step_size));
    }
    if (!(p.gamma > 0 && p.gamma <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("gamma must be in (0, 1], got ", p.gamma));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("decay must be constant, cosine or step, got '", kind, "'"));
  }
  return p;
}

namespace {

absl::StatusOr<std::vector<TensorSpec>> InferSchedule(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  if (in[0].shape.rank() != 0 || in[0].dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("the learning rate must be an f32 scalar, got ", in[0].ToString()));
  }
  if (in[1].dtype != DType::kInt32 || in[1].shape.rank() != 1 || in[1].shape.dim(0) != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the step counter must be i32[2], got ", in[1].ToString()));
  }
  RETURN_IF_ERROR(LrScheduleParams(attrs).status());
  return std::vector<TensorSpec>{in[0]};
}

absl::Status CpuSchedule(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(codegen::ScheduleParams p, LrScheduleParams(node.attrs));
  auto words = in[1]->data<int32_t>();
  const uint64_t step = static_cast<uint32_t>(words[0]) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(words[1])) << 32);
  const double factor = codegen::LrFactor(p, step);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    out[0]->data<T>()[0] = static_cast<T>(static_cast<double>(in[0]->data<T>()[0]) * factor);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSchedule(const LoweringContext& ctx,
                                                         const Node& node) {
  ASSIGN_OR_RETURN(codegen::ScheduleParams p, LrScheduleParams(node.attrs));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(p.warmup_steps)).Add(static_cast<int>(p.decay));
  args.Add(static_cast<long long>(p.total_steps)).Add(p.min_factor);
  args.Add(static_cast<long long>(p.step_size)).Add(p.gamma);
  return NvrtcKernel::Create(ctx, node.name, codegen::LrSchedule(), dim3(1), dim3(1), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& LrScheduleOp() {
  static const ir::OpDef op{.name = "lr_schedule",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSchedule,
                            .cpu = CpuSchedule,
                            .lower = LowerSchedule};
  return op;
}

}  // namespace reprise::ops
