// add_position_at and advance_position: the decode step's device-side position counter and the
// position embedding read at it (src/ops/decode_attention.h).
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/decode_kernels.h"
#include "src/codegen/element_type.h"
#include "src/ops/decode_attention.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

const TensorSpec kPositionSpec{Shape{1}, DType::kInt32};

absl::Status CheckPosition(const TensorSpec& spec) {
  if (spec != kPositionSpec) {
    return absl::InvalidArgumentError(
        absl::StrCat("position must be i32[1], got ", spec.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferAt(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(CheckRank(in[0], 2, "x"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  RETURN_IF_ERROR(CheckRank(in[1], 2, "table"));
  if (in[1].dtype != in[0].dtype || in[1].shape.dim(1) != in[0].shape.dim(1) ||
      in[1].shape.dim(0) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("table ", in[1].ToString(),
                                                   " must have x's dtype and last dimension and "
                                                   "at least one row, x ",
                                                   in[0].ToString()));
  }
  RETURN_IF_ERROR(CheckPosition(in[2]));
  return std::vector<TensorSpec>{in[0]};
}

absl::Status CpuAt(const Node& node, absl::Span<ir::HostTensor* const> in,
                   absl::Span<ir::HostTensor* const> out) {
  const int64_t rows = in[0]->spec().shape.dim(0), cols = in[0]->spec().shape.dim(1);
  const int64_t table_rows = in[1]->spec().shape.dim(0);
  const int64_t p = in[2]->data<int32_t>()[0];
  if (p < 0 || p >= table_rows) {
    return absl::OutOfRangeError(absl::StrCat("node '", node.name, "': position ", p,
                                              " is outside the table's ", table_rows, " rows"));
  }
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), table = in[1]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + table[p * cols + c];
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAt(const LoweringContext& ctx, const Node& node) {
  const DType dtype = ctx.input_specs[0].dtype;
  if (!codegen::IsKernelElementType(dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "' (add_position_at): no GPU kernel for ", DTypeName(dtype)));
  }
  const int64_t rows = ctx.input_specs[0].shape.dim(0), cols = ctx.input_specs[0].shape.dim(1);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(rows)).Add(static_cast<int>(cols));
  args.Add(static_cast<int>(ctx.input_specs[1].shape.dim(0)));
  return NvrtcKernel::Create(ctx, node.name, codegen::AddPositionAt(dtype),
                             GridFor(rows * cols, 256, *ctx.device), dim3(256), 0, std::move(args));
}

absl::StatusOr<std::vector<TensorSpec>> InferAdvance(const Attrs&,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckPosition(in[0]));
  return std::vector<TensorSpec>{kPositionSpec};
}

absl::Status CpuAdvance(const Node&, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  auto position = in[0]->data<int32_t>();
  position[0] += 1;
  out[0]->data<int32_t>()[0] = position[0];
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdvance(const LoweringContext& ctx,
                                                        const Node& node) {
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  return NvrtcKernel::Create(ctx, node.name, codegen::AdvancePosition(), dim3(1), dim3(1), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& AddPositionAtOp() {
  static const ir::OpDef op{.name = "add_position_at",
                            .infer = InferAt,
                            .cpu = CpuAt,
                            .lower = LowerAt,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& AdvancePositionOp() {
  static const ir::OpDef op{.name = "advance_position",
                            .infer = InferAdvance,
                            .cpu = CpuAdvance,
                            .lower = LowerAdvance,
                            .mutated_inputs = {0}};
  return op;
}

}  // namespace reprise::ops
