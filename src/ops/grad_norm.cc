// grad_sum_squares and clip_coefficient: the global gradient norm of torch.nn.utils.
// clip_grad_norm_ in two deterministic stages (no atomics): per-chunk sums of squares over every
// gradient, then one block adding them in a fixed order and turning the norm into the clip
// coefficient that the updates read from device memory. (A fused adam_multi does the second stage
// itself, in every block.) Under loss scaling (attr loss_scaled, the check f32[2] as the last
// input) the norm is that of the unscaled gradients. grad_sum_squares_nonfinite (written by the
// fuse pass) also makes the non-finite guard's flags in the same pass over the gradients.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/codegen/gradient_loads.h"
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

// The gradients among the inputs: all but the loss-scale check, when there is one.
size_t GradientCount(const Attrs& attrs, size_t num_inputs) {
  return ir::BoolAttrOr(attrs, "loss_scaled", false) && num_inputs > 0 ? num_inputs - 1
                                                                       : num_inputs;
}

absl::StatusOr<std::vector<TensorSpec>> InferSumSquares(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in) {
  const size_t gradients = GradientCount(attrs, in.size());
  if (gradients == 0) return absl::InvalidArgumentError("expected at least one gradient");
  if (gradients < in.size()) RETURN_IF_ERROR(CheckLossScaleCheck(in.back()));
  int64_t partials = 0;
  for (size_t i = 0; i < gradients; ++i) {
    // A 16-bit gradient is summed as its exact float32 widening (the reference executor widens it
    // for the reference; the kernel on load), before its widening cast: the same bits.
    if (in[i].dtype != DType::kFloat32 && !IsLowPrecision(in[i].dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient ", i, " must be float32, bfloat16 or float16, got ", in[i].ToString()));
    }
    const std::optional<int64_t> sum = CheckedAdd(partials, NormChunks(in[i].NumElements()));
    if (!sum.has_value()) {
      return absl::InvalidArgumentError("the gradients' chunks do not fit in int64");
    }
    partials = *sum;
  }
  if (partials == 0) return absl::InvalidArgumentError("the gradients have no elements");
  return std::vector<TensorSpec>{{Shape{partials}, DType::kFloat32}};
}

absl::Status CpuSumSquares(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  const size_t gradients = GradientCount(node.attrs, in.size());
  return DispatchFloat(out[0]->dtype(), [&]<typename T>() -> absl::Status {
    auto partials = out[0]->data<T>();
    const T unscale =
        gradients < in.size() ? static_cast<T>(ir::FloatElement(*in.back(), 0)) : T(1);
    size_t p = 0;
    for (size_t i = 0; i < gradients; ++i) {
      // Each gradient in the partials' type: a float64 reference widens a 16-bit gradient to
      // float32 while it promotes the float32 ones, so the types may differ.
      ir::HostTensor converted;
      const ir::HostTensor* gradient = in[i];
      if (gradient->dtype() != out[0]->dtype()) {
        converted = ir::HostTensor(TensorSpec{gradient->spec().shape, out[0]->dtype()});
        RETURN_IF_ERROR(ir::ConvertFloats(*gradient, converted));
        gradient = &converted;
      }
      auto x = gradient->data<T>();
      const int64_t n = static_cast<int64_t>(x.size());
      for (int64_t start = 0; start < n; start += codegen::kNormChunk) {
        partials[p++] = codegen::ChunkSumSquares(
            x.data() + start, std::min<int64_t>(codegen::kNormChunk, n - start), unscale);
      }
    }
    return absl::OkStatus();
  });
}

// One launch per codegen::kMaxMultiTensorCapacity tensors of the first `tensors` inputs (one for
// any model below that), its blocks striding over every chunk of every tensor: the sums of squares
// of the chunks below `partial_count`, and where `flags` is not null every chunk's non-finite flag.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerChunkSums(const LoweringContext& ctx,
                                                          const Node& node, int64_t tensors,
                                                          const void* check, void* flags,
                                                          int64_t partial_count) {
  std::vector<std::unique_ptr<GpuKernel>> parts;
  int64_t first_partial = 0;
  for (int64_t first = 0; first < tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count = std::min<int64_t>(codegen::kMaxMultiTensorCapacity, tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    ChunkTable table(capacity, 1);
    std::vector<unsigned char> kinds(capacity, 0);  // codegen::GradSumSquares' GradKinds.
    for (int64_t t = first; t < first + count; ++t) {
      RETURN_IF_ERROR(table.Add({ctx.inputs[t]}, ctx.input_specs[t].NumElements()));
      kinds[t - first] = codegen::GradientKind(ctx.input_specs[t].dtype);
    }
    KernelArgs args;
    args.AddBytes(table.data(), table.bytes()).AddBytes(kinds.data(), kinds.size());
    args.Add(table.count());
    args.Add(ctx.outputs[0]).Add(static_cast<long long>(first_partial)).Add(check);
    args.Add(flags).Add(static_cast<long long>(partial_count));
    // A warp a chunk (codegen::GradSumSquares), at most one wave of blocks.
    const int64_t warps_per_block = codegen::kNormBlock / 32;
    const int64_t most = int64_t{ctx.device->sm_count} * codegen::kSumSquaresBlocksPerSm;
    const int64_t blocks = (table.chunks() + warps_per_block - 1) / warps_per_block;
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, most))));
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::GradSumSquares(capacity), grid,
                                         dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
    first_partial += table.chunks();
  }
  return Sequence(std::move(parts));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSumSquares(const LoweringContext& ctx,
                                                           const Node& node) {
  const int64_t tensors = static_cast<int64_t>(GradientCount(node.attrs, ctx.inputs.size()));
  const void* check =
      tensors < static_cast<int64_t>(ctx.inputs.size()) ? ctx.inputs.back() : nullptr;
  return LowerChunkSums(ctx, node, tensors, check, nullptr, node.outputs[0].NumElements());
}

// grad_sum_squares_nonfinite ------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferSumSquaresNonfinite(const Attrs& attrs,
                                                                 absl::Span<const TensorSpec> in) {
  if (ir::BoolAttrOr(attrs, "loss_scaled", false)) {
    return absl::InvalidArgumentError(
        "the non-finite check in the norm's pass has no loss scaling");
  }
  if (in.size() < 2) return absl::InvalidArgumentError("expected the gradients, then the loss");
  ASSIGN_OR_RETURN(std::vector<TensorSpec> partials, InferSumSquares({}, in.first(in.size() - 1)));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> flags, GradNonfiniteOp().infer({}, in));
  return std::vector<TensorSpec>{partials[0], flags[0]};
}

absl::Status CpuSumSquaresNonfinite(const Node& node, absl::Span<ir::HostTensor* const> in,
                                    absl::Span<ir::HostTensor* const> out) {
  const Node plain;  // No loss scaling: nothing to unscale.
  RETURN_IF_ERROR(CpuSumSquares(plain, in.first(in.size() - 1), out.first(1)));
  return GradNonfiniteOp().cpu(node, in, out.subspan(1, 1));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSumSquaresNonfinite(const LoweringContext& ctx,
                                                                    const Node& node) {
  return LowerChunkSums(ctx, node, static_cast<int64_t>(ctx.inputs.size()), nullptr, ctx.outputs[1],
                        node.outputs[0].NumElements());
}

// clip_coefficient ----------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferClip(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckRank(in[0], 1, "partial sums"));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "partial sums"));
  if (in[1].shape.rank() != 0 || in[1].dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_norm must be an f32 scalar, got ", in[1].ToString()));
  }
  const TensorSpec scalar{Shape{}, in[0].dtype};
  return std::vector<TensorSpec>{scalar, scalar};
}

absl::Status CpuClip(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto partials = in[0]->data<T>();
    const double norm = std::sqrt(codegen::SumPartials(partials.data(), partials.size()));
    const double max_norm = in[1]->data<T>()[0];
    out[0]->data<T>()[0] = static_cast<T>(norm);
    out[1]->data<T>()[0] = static_cast<T>(codegen::ClipCoefficient(norm, max_norm));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerClip(const LoweringContext& ctx, const Node& node) {
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(static_cast<long long>(ctx.input_specs[0].NumElements()));
  args.Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(ctx.outputs[1]);
  return NvrtcKernel::Create(ctx, node.name, codegen::ClipCoefficientKernel(), dim3(1),
                             dim3(codegen::kNormBlock), 0, std::move(args));
}

}  // namespace

const ir::OpDef& GradSumSquaresOp() {
  static const ir::OpDef op{.name = "grad_sum_squares",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSumSquares,
                            .cpu = CpuSumSquares,
                            .lower = LowerSumSquares,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& GradSumSquaresNonfiniteOp() {
  static const ir::OpDef op{.name = "grad_sum_squares_nonfinite",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSumSquaresNonfinite,
                            .cpu = CpuSumSquaresNonfinite,
                            .lower = LowerSumSquaresNonfinite,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& ClipCoefficientOp() {
  static const ir::OpDef op{.name = "clip_coefficient",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferClip,
                            .cpu = CpuClip,
                            .lower = LowerClip};
  return op;
}

}  // namespace reprise::ops
