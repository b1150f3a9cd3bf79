// cast_multi (src/ops/cast.h): every parameter's 16-bit copy in one launch instead of one launch
// per parameter. Each element is rounded as cast rounds it, so the bits are the casts'.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/cast_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferCastMulti(const Attrs& attrs,
                                                       absl::Span<const TensorSpec> in) {
  if (in.empty()) return absl::InvalidArgumentError("expected at least one tensor");
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < in.size(); ++i) {
    RETURN_IF_ERROR(CheckDType(in[i], DType::kFloat32, absl::StrCat("tensor ", i)));
    ASSIGN_OR_RETURN(std::vector<TensorSpec> single, CastOp().infer(attrs, {in[i]}));
    if (!IsLowPrecision(single[0].dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cast_multi converts to bf16 or f16, not ", DTypeName(single[0].dtype)));
    }
    out.push_back(single[0]);
  }
  return out;
}

absl::Status CpuCastMulti(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  for (size_t i = 0; i < in.size(); ++i) RETURN_IF_ERROR(ir::ConvertFloats(*in[i], *out[i]));
  return absl::OkStatus();
}

// One launch per codegen::kMaxMultiTensorCapacity tensors (one for any model below that), its
// blocks striding over every chunk of every tensor.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCastMulti(const LoweringContext& ctx,
                                                          const Node& node) {
  const int64_t tensors = static_cast<int64_t>(ctx.inputs.size());
  const DType to = node.outputs[0].dtype;
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count = std::min<int64_t>(codegen::kMaxMultiTensorCapacity, tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    ChunkTable table(capacity, 2);
    for (int64_t t = first; t < first + count; ++t) {
      RETURN_IF_ERROR(table.Add({ctx.inputs[t], ctx.outputs[t]}, ctx.input_specs[t].NumElements()));
    }
    KernelArgs args;
    args.AddBytes(table.data(), table.bytes()).Add(table.count());
    const int64_t most = int64_t{ctx.device->sm_count} * codegen::kNormBlocksPerSm;
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(table.chunks(), most))));
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::CastMulti(capacity, to), grid,
                                         dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  return Sequence(std::move(parts));
}

}  // namespace

const ir::OpDef& CastMultiOp() {
  static const ir::OpDef op{.name = "cast_multi",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferCastMulti,
                            .cpu = CpuCastMulti,
                            .lower = LowerCastMulti,
                            .low_precision = true,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
