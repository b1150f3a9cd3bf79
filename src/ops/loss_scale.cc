// Dynamic loss scaling on the device (src/codegen/loss_scale_kernels.h): grad_nonfinite flags the
// chunks of the gradients that hold an inf or a NaN, loss_scale_check turns the flags and the scale
// into the check [1 / scale, found] that the optimizer updates read, and loss_scale_update moves
// the scale and its counters on after the update. The non-finite guard (src/autodiff/
// non_finite_guard.h) is the same check without a scale (check[0] = 1), optionally sticky, that
// also keeps its counters. Flags and checks are exact (0, 1, a power of
// two's inverse when the scale is one), so the reference and the kernels agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

int64_t ChunksOf(int64_t n) { return (n + codegen::kNormChunk - 1) / codegen::kNormChunk; }

absl::Status CheckScalar(const TensorSpec& spec, DType dtype, absl::string_view what) {
  if (spec.shape.rank() != 0 || spec.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a ", DTypeName(dtype), " scalar, got ", spec.ToString()));
  }
  return absl::OkStatus();
}

// grad_nonfinite ------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferNonfinite(const Attrs&,
                                                       absl::Span<const TensorSpec> in) {
  if (in.empty()) return absl::InvalidArgumentError("expected at least one gradient");
  int64_t chunks = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    // 16-bit gradients are checked before their widening cast: a cast of a finite value is finite.
    if (in[i].dtype != DType::kFloat32 && !IsLowPrecision(in[i].dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient ", i, " must be float32, bfloat16 or float16, got ", in[i].ToString()));
    }
    const std::optional<int64_t> sum = CheckedAdd(chunks, ChunksOf(in[i].NumElements()));
    if (!sum.has_value()) {
      return absl::InvalidArgumentError("the gradients' chunks do not fit in int64");
    }
    chunks = *sum;
  }
  if (chunks == 0) return absl::InvalidArgumentError("the gradients have no elements");
  if (chunks > std::numeric_limits<int32_t>::max()) {  // The kernel's flag indices are int.
    return absl::InvalidArgumentError(
        absl::StrCat("the gradients have ", chunks, " chunks to check, more than 2^31 - 1"));
  }
  return std::vector<TensorSpec>{{Shape{chunks}, DType::kFloat32}};
}

absl::Status CpuNonfinite(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  // The flags' own type: a float64 reference promotes them to float64.
  int64_t f = 0;
  for (const ir::HostTensor* g : in) {
    const int64_t n = g->spec().shape.NumElements();
    for (int64_t start = 0; start < n; start += codegen::kNormChunk) {
      const int64_t end = std::min<int64_t>(start + codegen::kNormChunk, n);
      bool bad = false;
      for (int64_t i = start; i < end && !bad; ++i) bad = !std::isfinite(ir::FloatElement(*g, i));
      ir::SetFloatElement(*out[0], f++, bad ? 1.0 : 0.0);
    }
  }
  return absl::OkStatus();
}

// One launch per codegen::kMaxMultiTensorCapacity gradients (one for any model below that), its
// blocks striding over every chunk of every gradient, as grad_sum_squares does.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNonfinite(const LoweringContext& ctx,
                                                          const Node& node) {
  const int64_t tensors = static_cast<int64_t>(ctx.inputs.size());
  std::vector<std::unique_ptr<GpuKernel>> parts;
  int64_t first_flag = 0;
  for (int64_t first = 0; first < tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count = std::min<int64_t>(codegen::kMaxMultiTensorCapacity, tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    ChunkTable table(capacity, 1);
    std::vector<unsigned char> kinds(capacity, 0);  // As codegen::GradNonfinite's NonfiniteKinds.
    for (int64_t t = first; t < first + count; ++t) {
      RETURN_IF_ERROR(table.Add({ctx.inputs[t]}, ctx.input_specs[t].NumElements()));
      const DType dtype = ctx.input_specs[t].dtype;
      kinds[t - first] = dtype == DType::kBFloat16 ? 1 : dtype == DType::kFloat16 ? 2 : 0;
    }
    KernelArgs args;
    args.AddBytes(table.data(), table.bytes()).AddBytes(kinds.data(), kinds.size());
    args.Add(table.count()).Add(ctx.outputs[0]).Add(static_cast<long long>(first_flag));
    const int64_t most = int64_t{ctx.device->sm_count} * codegen::kNormBlocksPerSm;
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(table.chunks(), most))));
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::GradNonfinite(capacity), grid,
                                         dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
    first_flag += table.chunks();
  }
  return Sequence(std::move(parts));
}

// loss_scale_check ----------------------------------------------------------------------------

// The inputs after the flags: loss scaling's (flags, scale); the non-finite guard's, with attr
// count, (flags, skipped_steps i32[], record i32[2]), which the check moves on in place (a
// counter launch fewer), and with attr sticky (kStop) also finds a step non-finite once the
// record holds one.
struct CheckInputs {
  int scale = -1, skipped = -1, record = -1;
  bool sticky = false;
};

CheckInputs CheckInputsOf(const Attrs& attrs, size_t count) {
  CheckInputs c;
  c.sticky = ir::BoolAttrOr(attrs, "sticky", false);
  if (ir::BoolAttrOr(attrs, "count", false)) {
    c.skipped = 1;
    c.record = 2;
  } else if (count == 2) {
    c.scale = 1;
  }
  return c;
}

absl::StatusOr<std::vector<TensorSpec>> InferCheck(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  const CheckInputs c = CheckInputsOf(attrs, in.size());
  if (c.record >= 0 ? in.size() != 3 : in.empty() || in.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", c.record >= 0 ? "(flags, skipped_steps, record)" : "(flags[, scale])",
        ", got ", in.size(), " inputs"));
  }
  if (c.sticky && c.record < 0) {
    return absl::InvalidArgumentError("attr sticky needs the guard's counters (attr count)");
  }
  RETURN_IF_ERROR(CheckRank(in[0], 1, "flags"));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "flags"));
  if (c.scale >= 0) RETURN_IF_ERROR(CheckScalar(in[c.scale], DType::kFloat32, "the loss scale"));
  if (c.skipped >= 0) {
    RETURN_IF_ERROR(CheckScalar(in[c.skipped], DType::kInt32, "the skipped-step count"));
  }
  if (c.record >= 0 && !(in[c.record] == TensorSpec{Shape{2}, DType::kInt32})) {
    return absl::InvalidArgumentError(
        absl::StrCat("the non-finite record must be an i32[2], got ", in[c.record].ToString()));
  }
  return std::vector<TensorSpec>{{Shape{2}, in[0].dtype}};
}

std::vector<int> MutatedCheck(const Attrs& attrs, int num_inputs) {
  const CheckInputs c = CheckInputsOf(attrs, static_cast<size_t>(num_inputs));
  if (c.skipped < 0) return {};
  return {c.skipped, c.record};
}

absl::Status CpuCheck(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  const CheckInputs c = CheckInputsOf(node.attrs, in.size());
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto flags = in[0]->data<T>();
    bool found = std::any_of(flags.begin(), flags.end(), [](T f) { return f != T(0); });
    if (c.sticky) found = found || in[c.record]->data<int32_t>()[1] != 0;
    auto check = out[0]->data<T>();
    check[0] =
        c.scale >= 0 ? static_cast<T>(1.0 / static_cast<double>(in[c.scale]->data<T>()[0])) : T(1);
    check[1] = found ? T(1) : T(0);
    if (c.skipped >= 0) {  // skipped_steps counts; record = [steps, 1 + the first found or 0].
      int32_t& skipped = in[c.skipped]->data<int32_t>()[0];
      auto record = in[c.record]->data<int32_t>();
      const int32_t steps = record[0];
      if (found) {
        ++skipped;
        if (record[1] == 0) record[1] = steps + 1;
      }
      record[0] = steps + 1;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCheck(const LoweringContext& ctx,
                                                      const Node& node) {
  const CheckInputs c = CheckInputsOf(node.attrs, ctx.inputs.size());
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(static_cast<long long>(ctx.input_specs[0].NumElements()));
  args.Add(c.scale >= 0 ? ctx.inputs[c.scale] : nullptr);
  args.Add(c.record >= 0 ? ctx.inputs[c.record] : nullptr);
  args.Add(c.sticky ? 1 : 0);
  args.Add(c.skipped >= 0 ? ctx.inputs[c.skipped] : nullptr);
  args.Add(ctx.outputs[0]);
  return NvrtcKernel::Create(ctx, node.name, codegen::LossScaleCheck(), dim3(1),
                             dim3(codegen::kNormBlock), 0, std::move(args));
}

// loss_scale_update ---------------------------------------------------------------------------

struct UpdateParams {
  double growth = 2, backoff = 0.5;
  int64_t interval = 2000;
};

absl::StatusOr<UpdateParams> UpdateParamsOf(const Attrs& attrs) {
  UpdateParams p;
  ASSIGN_OR_RETURN(p.growth, ir::FloatAttr(attrs, "growth_factor"));
  ASSIGN_OR_RETURN(p.backoff, ir::FloatAttr(attrs, "backoff_factor"));
  ASSIGN_OR_RETURN(p.interval, ir::IntAttr(attrs, "growth_interval"));
  if (!(std::isfinite(p.growth) && p.growth >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("growth_factor must be finite and at least 1, got ", p.growth));
  }
  if (!(p.backoff > 0 && p.backoff <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backoff_factor must be in (0, 1], got ", p.backoff));
  }
  if (p.interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("growth_interval must be at least 1, got ", p.interval));
  }
  return p;
}

absl::StatusOr<std::vector<TensorSpec>> InferUpdate(const Attrs& attrs,
                                                    absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 4));
  RETURN_IF_ERROR(CheckScalar(in[0], DType::kFloat32, "the loss scale"));
  RETURN_IF_ERROR(CheckScalar(in[1], DType::kInt32, "the growth tracker"));
  RETURN_IF_ERROR(CheckScalar(in[2], DType::kInt32, "the skipped-step count"));
  RETURN_IF_ERROR(CheckLossScaleCheck(in[3]));
  RETURN_IF_ERROR(UpdateParamsOf(attrs).status());
  return std::vector<TensorSpec>{};
}

absl::Status CpuUpdate(const Node& node, absl::Span<ir::HostTensor* const> in,
                       absl::Span<ir::HostTensor* const>) {
  ASSIGN_OR_RETURN(const UpdateParams p, UpdateParamsOf(node.attrs));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    codegen::LossScaleState<T> s{.scale = in[0]->data<T>()[0],
                                 .growth_tracker = in[1]->data<int32_t>()[0],
                                 .skipped_steps = in[2]->data<int32_t>()[0]};
    // The factors are float attributes of the float32 kernel.
    const T growth = static_cast<T>(static_cast<float>(p.growth));
    const T backoff = static_cast<T>(static_cast<float>(p.backoff));
    s = codegen::NextLossScale(s, in[3]->data<T>()[1] != T(0), growth, backoff, p.interval);
    in[0]->data<T>()[0] = s.scale;
    in[1]->data<int32_t>()[0] = s.growth_tracker;
    in[2]->data<int32_t>()[0] = s.skipped_steps;
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerUpdate(const LoweringContext& ctx,
                                                       const Node& node) {
  ASSIGN_OR_RETURN(const UpdateParams p, UpdateParamsOf(node.attrs));
  KernelArgs args;
  for (int i = 0; i < 4; ++i) args.Add(ctx.inputs[i]);
  args.Add(static_cast<float>(p.growth)).Add(static_cast<float>(p.backoff));
  args.Add(static_cast<long long>(p.interval));
  return NvrtcKernel::Create(ctx, node.name, codegen::LossScaleUpdate(), dim3(1), dim3(1), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& GradNonfiniteOp() {
  static const ir::OpDef op{.name = "grad_nonfinite",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferNonfinite,
                            .cpu = CpuNonfinite,
                            .lower = LowerNonfinite,
                            .low_precision = true,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& LossScaleCheckOp() {
  static const ir::OpDef op{.name = "loss_scale_check",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferCheck,
                            .cpu = CpuCheck,
                            .lower = LowerCheck,
                            .mutated_inputs_of = MutatedCheck};
  return op;
}

const ir::OpDef& LossScaleUpdateOp() {
  static const ir::OpDef op{.name = "loss_scale_update",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferUpdate,
                            .cpu = CpuUpdate,
                            .lower = LowerUpdate,
                            .mutated_inputs = {0, 1, 2}};
  return op;
}

}  // namespace reprise::ops
