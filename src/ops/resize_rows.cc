#include "src/ops/resize_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/resize_rows_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferResizeRows(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  if (in[0].shape.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must have rank 1 or more to resize its rows, got ", in[0].ToString()));
  }
  ASSIGN_OR_RETURN(const int64_t rows, ir::IntAttr(attrs, "rows"));
  if (rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'rows' must be at least 1, got ", rows));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[0] = rows;
  std::vector<int64_t> bytes = dims;
  bytes.push_back(static_cast<int64_t>(DTypeSize(in[0].dtype)));
  if (!CheckedProduct(bytes).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resizing x ", in[0].ToString(), " to ", rows, " rows overflows int64 bytes"));
  }
  return std::vector<TensorSpec>{{Shape(std::move(dims)), in[0].dtype}};
}

absl::StatusOr<std::vector<Value>> GradResizeRows(Graph& g, const Node& node,
                                                  absl::Span<const Value> dout,
                                                  const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (!needs[0]) return grads;
  const int64_t rows = g.spec(node.inputs[0]).shape.dim(0);
  ASSIGN_OR_RETURN(grads[0], g.AddOp1(ResizeRowsOp(), absl::StrCat(node.name, ".grad"), {dout[0]},
                                      {{"rows", rows}}));
  return grads;
}

// The bytes both tensors share: x's leading ones, at most y's.
int64_t KeptBytes(const TensorSpec& x, const TensorSpec& y) {
  return std::min(x.bytes(), y.bytes());
}

absl::Status CpuResizeRows(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  if (in[0]->dtype() != out[0]->dtype()) {
    return absl::InternalError(absl::StrCat("node '", node.name, "': input ",
                                            in[0]->spec().ToString(), " and output ",
                                            out[0]->spec().ToString(), " differ in dtype"));
  }
  const int64_t kept = KeptBytes(in[0]->spec(), out[0]->spec());
  auto* y = static_cast<unsigned char*>(out[0]->raw());
  std::memcpy(y, in[0]->raw(), static_cast<size_t>(kept));
  std::memset(y + kept, 0, static_cast<size_t>(out[0]->spec().bytes() - kept));
  return absl::OkStatus();
}

// The widest word that divides both byte counts and both addresses.
int WordBytes(int64_t kept, int64_t total, const void* x, void* y) {
  for (int word : codegen::kResizeRowsWordBytes) {
    const bool aligned =
        reinterpret_cast<uintptr_t>(x) % word == 0 && reinterpret_cast<uintptr_t>(y) % word == 0;
    if (kept % word == 0 && total % word == 0 && aligned) return word;
  }
  return 1;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerResizeRows(const LoweringContext& ctx,
                                                           const Node& node) {
  const int64_t total = node.outputs[0].bytes();
  const int64_t kept = KeptBytes(ctx.input_specs[0], node.outputs[0]);
  const int word = WordBytes(kept, total, ctx.inputs[0], ctx.outputs[0]);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(kept / word)).Add(static_cast<long long>(total / word));
  return NvrtcKernel::Create(ctx, node.name, codegen::ResizeRows(word),
                             GridFor(total / word, 256, *ctx.device), dim3(256), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& ResizeRowsOp() {
  static const ir::OpDef op{.name = "resize_rows",
                            .infer = InferResizeRows,
                            .grad = GradResizeRows,
                            .cpu = CpuResizeRows,
                            .lower = LowerResizeRows,
                            .low_precision = true,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
