// cast_multi (src/ops/cast.h): every parameter's 16-bit copy in one launch instead of one launch
// per parameter. Each element is rounded as cast rounds it, so the bits are the casts'.
// refresh_copies: the same launch writing copies the update keeps between steps, which does
// nothing unless the host marked them stale (its kernel's Settle).
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
#include "src/runtime/cuda_status.h"
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
// blocks striding over every chunk of every tensor: sources[t] rounded into copies[t]. With
// `stale`, the refresh form (codegen::CastMulti's), which reads that flag first.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCasts(const LoweringContext& ctx, const Node& node,
                                                      absl::Span<void* const> sources,
                                                      absl::Span<void* const> copies, DType to,
                                                      void* stale) {
  const int64_t tensors = static_cast<int64_t>(sources.size());
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count = std::min<int64_t>(codegen::kMaxMultiTensorCapacity, tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    ChunkTable table(capacity, 2);
    for (int64_t t = first; t < first + count; ++t) {
      RETURN_IF_ERROR(table.Add({sources[t], copies[t]}, ctx.input_specs[t].NumElements()));
    }
    KernelArgs args;
    args.AddBytes(table.data(), table.bytes()).Add(table.count());
    if (stale != nullptr) args.Add(stale);
    const int64_t most = int64_t{ctx.device->sm_count} * codegen::kNormBlocksPerSm;
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(table.chunks(), most))));
    ASSIGN_OR_RETURN(
        std::unique_ptr<GpuKernel> part,
        NvrtcKernel::Create(ctx, node.name, codegen::CastMulti(capacity, to, stale != nullptr),
                            grid, dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  return Sequence(std::move(parts));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCastMulti(const LoweringContext& ctx,
                                                          const Node& node) {
  return LowerCasts(ctx, node, ctx.inputs, ctx.outputs, node.outputs[0].dtype, nullptr);
}

// refresh_copies' inputs: n float32 parameters, their n copies, the flag.
absl::StatusOr<int64_t> RefreshedTensors(size_t num_inputs) {
  if (num_inputs < 3 || num_inputs % 2 == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected n parameters, their n 16-bit copies and the stale flag; got ",
                     num_inputs, " inputs"));
  }
  return static_cast<int64_t>(num_inputs / 2);
}

absl::StatusOr<std::vector<TensorSpec>> InferRefreshCopies(const Attrs& attrs,
                                                           absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const int64_t n, RefreshedTensors(in.size()));
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> copies, InferCastMulti(attrs, in.subspan(0, n)));
  for (int64_t t = 0; t < n; ++t) {
    if (in[n + t] != copies[t]) {
      return absl::InvalidArgumentError(absl::StrCat("copy ", t, " is ", in[n + t].ToString(),
                                                     "; expected ", copies[t].ToString()));
    }
  }
  RETURN_IF_ERROR(CheckStaleFlag(in[2 * n]));
  return std::vector<TensorSpec>{};
}

absl::Status CpuRefreshCopies(const Node&, absl::Span<ir::HostTensor* const> in,
                              absl::Span<ir::HostTensor* const>) {
  ASSIGN_OR_RETURN(const int64_t n, RefreshedTensors(in.size()));
  if (in[2 * n]->data<int32_t>()[0] == 0) return absl::OkStatus();  // Current.
  for (int64_t t = 0; t < n; ++t) RETURN_IF_ERROR(ir::ConvertFloats(*in[t], *in[n + t]));
  return absl::OkStatus();
}

std::vector<int> RefreshMutated(const Attrs&, int num_inputs) {
  std::vector<int> copies;
  for (int i = num_inputs / 2; i < num_inputs - 1; ++i) copies.push_back(i);
  return copies;
}

// The refresh launches, and as their Settle the flag set: whoever writes the parameters outside a
// step settles first (Trainer::Impl::SettleParameters), so the next step rounds them again.
class RefreshCopies : public GpuKernel {
 public:
  RefreshCopies(std::unique_ptr<GpuKernel> casts, void* stale, std::string node_name)
      : casts_(std::move(casts)), stale_(stale), node_name_(std::move(node_name)) {}
  absl::Status Launch(cudaStream_t stream) const override { return casts_->Launch(stream); }
  std::string Describe() const override {
    return absl::StrCat(casts_->Describe(), "; only after the host wrote the parameters");
  }
  std::vector<std::string> GeneratedKernelNames() const override {
    return casts_->GeneratedKernelNames();
  }
  absl::Status Settle(cudaStream_t stream) const override {
    return runtime::CudaStatus(cudaMemsetAsync(stale_, 1, sizeof(int32_t), stream),
                               "cudaMemsetAsync", absl::StrCat("marking '", node_name_, "' stale"));
  }
  bool NeedsSettle() const override { return true; }
  bool LetsDependentsStartEarly() const override { return casts_->LetsDependentsStartEarly(); }
  void SetDependentStart(bool allowed) override { casts_->SetDependentStart(allowed); }

 private:
  std::unique_ptr<GpuKernel> casts_;
  void* stale_;
  std::string node_name_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerRefreshCopies(const LoweringContext& ctx,
                                                              const Node& node) {
  ASSIGN_OR_RETURN(const int64_t n, RefreshedTensors(ctx.inputs.size()));
  const absl::Span<void* const> all(ctx.inputs);
  void* stale = ctx.inputs[2 * n];
  ASSIGN_OR_RETURN(const DType to, CastTargetOf(node.attrs));
  ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> casts,
                   LowerCasts(ctx, node, all.subspan(0, n), all.subspan(n, n), to, stale));
  return std::make_unique<RefreshCopies>(std::move(casts), stale, node.name);
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

const ir::OpDef& RefreshCopiesOp() {
  static const ir::OpDef op{.name = "refresh_copies",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferRefreshCopies,
                            .cpu = CpuRefreshCopies,
                            .lower = LowerRefreshCopies,
                            .mutated_inputs_of = RefreshMutated,
                            .low_precision = true,
                            .low_precision_lowering = true};
  return op;
}

absl::Status CheckStaleFlag(const TensorSpec& flag) {
  if (flag.dtype != DType::kInt32 || flag.shape.rank() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stale flag is ", flag.ToString(), "; expected an i32 scalar"));
  }
  return absl::OkStatus();
}

}  // namespace reprise::ops
