// GPU lowerings of causal_attention and causal_attention_grad: cuDNN's fused flash attention for
// bfloat16 and float16 (src/runtime/cudnn_sdpa.h), our own exact kernels for float32 and for
// 16-bit shapes cuDNN does not take (src/codegen/attention_kernels.h).
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/attention_kernels.h"
#include "src/codegen/element_type.h"
#include "src/ops/attention_internal.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cudnn_sdpa.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// Device addresses of one node's operands, q, k and v (and their gradients) each at its first
// element.
struct AttentionBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* y = nullptr;
  const void* stats = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;  // Forward: y.
  void* out_stats = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// q, k and v of `base` (n = 1 packed tensor, or 3 separate ones).
template <typename P>
void Split(const AttentionDims& dims, const std::vector<void*>& base, P* qkv[3]) {
  const int64_t bytes = codegen::ElementBytes(dims.dtype);
  for (int i = 0; i < 3; ++i) {
    if (dims.packed) {
      const int64_t offset = i == 0 ? 0 : i == 1 ? dims.k_offset() : dims.v_offset();
      qkv[i] = static_cast<char*>(base[0]) + offset * bytes;
    } else {
      qkv[i] = base[i];
    }
  }
}

AttentionBuffers BuffersOf(const AttentionDims& dims, const LoweringContext& ctx, bool grad) {
  AttentionBuffers b;
  const void* in[3];
  Split(dims, ctx.inputs, in);
  b.q = in[0];
  b.k = in[1];
  b.v = in[2];
  if (!grad) {
    b.out = ctx.outputs[0];
    b.out_stats = ctx.outputs[1];
    return b;
  }
  const int n = dims.num_qkv();
  b.y = ctx.inputs[n];
  b.stats = ctx.inputs[n + 1];
  b.dy = ctx.inputs[n + 2];
  void* out[3];
  Split(dims, ctx.outputs, out);
  b.dq = out[0];
  b.dk = out[1];
  b.dv = out[2];
  return b;
}

// Which GPU a built cuDNN graph serves: its plans were finalised for that device.
std::string DeviceKey(const runtime::DeviceInfo* device) {
  if (device == nullptr) return "";
  return absl::StrCat(device->ordinal, " ", device->name, " sm_", device->cc_major,
                      device->cc_minor);
}

// One cuDNN execution with its graph built at lowering; Launch binds the stream and enqueues.
class CudnnAttentionKernel : public GpuKernel {
 public:
  CudnnAttentionKernel(std::string where, runtime::CudnnSdpa sdpa, const LoweringContext& ctx,
                       const AttentionBuffers& buffers)
      : where_(std::move(where)),
        sdpa_(std::move(sdpa)),
        cudnn_(ctx.cudnn),
        workspace_(ctx.workspace),
        b_(buffers) {}

  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    if (sdpa_.pass() == runtime::SdpaPass::kForward) {
      return sdpa_.RunForward(*cudnn_, {b_.q, b_.k, b_.v, b_.out, b_.out_stats}, workspace_,
                              where_);
    }
    return sdpa_.RunBackward(*cudnn_,
                             {b_.q, b_.k, b_.v, b_.y, b_.dy, b_.stats, b_.dq, b_.dk, b_.dv},
                             workspace_, where_);
  }
  std::string Describe() const override { return sdpa_.Describe(); }
  size_t WorkspaceBytes() const override { return sdpa_.workspace_bytes(); }

 private:
  std::string where_;  // "<op> node '<name>'", for errors.
  runtime::CudnnSdpa sdpa_;
  const runtime::CudnnHandle* cudnn_;
  void* workspace_;
  AttentionBuffers b_;
};

// cuDNN's plan for the node, or Unimplemented when cuDNN does not take the shape (the caller
// then runs our kernels).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCudnn(const LoweringContext& ctx,
                                                      const std::string& where,
                                                      const AttentionDims& dims, bool grad) {
  const runtime::SdpaShape shape{.batch = dims.batch,
                                 .heads = dims.heads,
                                 .seq = dims.seq,
                                 .head_dim = dims.head_dim,
                                 .dtype = dims.dtype,
                                 .row_stride = dims.row()};
  RETURN_IF_ERROR(runtime::SdpaShapeSupported(shape));
  if (ctx.cudnn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": needs a cuDNN handle to lower"));
  }
  const runtime::SdpaOptions options{.deterministic = ctx.options.deterministic,
                                     .device = DeviceKey(ctx.device)};
  ASSIGN_OR_RETURN(
      runtime::CudnnSdpa sdpa,
      runtime::CudnnSdpa::Create(*ctx.cudnn,
                                 grad ? runtime::SdpaPass::kBackward : runtime::SdpaPass::kForward,
                                 shape, options, where));
  if (sdpa.workspace_bytes() > 0 &&
      (ctx.workspace == nullptr || sdpa.workspace_bytes() > ctx.workspace_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": ", sdpa.Describe(), " needs ", sdpa.workspace_bytes(),
        " bytes of workspace; its lane has ", ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  return std::unique_ptr<GpuKernel>(
      new CudnnAttentionKernel(where, std::move(sdpa), ctx, BuffersOf(dims, ctx, grad)));
}

// Our kernels: grid (T, H, B), one block per position.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerOwn(const LoweringContext& ctx,
                                                    const std::string& name,
                                                    const std::string& where,
                                                    const AttentionDims& dims, bool grad) {
  if (!codegen::IsKernelElementType(dims.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": causal attention runs on the GPU in float32, bfloat16 or float16, got ",
        DTypeName(dims.dtype)));
  }
  const int64_t shared = codegen::AttentionSharedBytes(dims.seq, dims.head_dim);
  const int64_t shared_limit = ctx.device != nullptr && ctx.device->max_shared_per_block > 0
                                   ? ctx.device->max_shared_per_block
                                   : 48 << 10;
  if (shared > shared_limit || dims.heads > 65535 || dims.batch > 65535 ||
      dims.seq > (int64_t{1} << 31) - 1 || dims.head_dim > (int64_t{1} << 31) - 1) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": the exact attention kernels keep a row of ", dims.seq,
        " scores in shared memory (", shared, " bytes, the device allows ", shared_limit,
        ") and take at most 65535 heads and batches; use bfloat16 (cuDNN's fused attention)"));
  }
  const dim3 grid(static_cast<unsigned>(dims.seq), static_cast<unsigned>(dims.heads),
                  static_cast<unsigned>(dims.batch));
  const dim3 block(codegen::kAttentionBlock);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  const AttentionBuffers b = BuffersOf(dims, ctx, grad);
  auto tail = [&](KernelArgs& args) {
    args.Add(static_cast<int>(dims.seq)).Add(static_cast<int>(dims.heads));
    args.Add(static_cast<int>(dims.head_dim)).Add(static_cast<long long>(dims.row()));
    args.Add(scale);
  };
  if (!grad) {
    KernelArgs args;
    args.Add(b.q).Add(b.k).Add(b.v).Add(b.out).Add(b.out_stats);
    tail(args);
    return NvrtcKernel::Create(ctx, name, codegen::AttentionForward(dims.dtype), grid, block,
                               static_cast<unsigned>(shared), std::move(args));
  }
  KernelArgs dq_args;
  dq_args.Add(b.q).Add(b.k).Add(b.v).Add(b.y).Add(b.dy).Add(b.stats).Add(b.dq);
  tail(dq_args);
  KernelArgs dkv_args;
  dkv_args.Add(b.q).Add(b.k).Add(b.v).Add(b.y).Add(b.dy).Add(b.stats).Add(b.dk).Add(b.dv);
  tail(dkv_args);
  std::vector<std::unique_ptr<GpuKernel>> kernels(2);
  ASSIGN_OR_RETURN(kernels[0],
                   NvrtcKernel::Create(ctx, name, codegen::AttentionBackwardDq(dims.dtype), grid,
                                       block, static_cast<unsigned>(shared), std::move(dq_args)));
  ASSIGN_OR_RETURN(kernels[1],
                   NvrtcKernel::Create(ctx, name, codegen::AttentionBackwardDkv(dims.dtype), grid,
                                       block, static_cast<unsigned>(shared), std::move(dkv_args)));
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), 0));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node,
                                                 bool grad) {
  const std::string where = absl::StrCat(node.op_name(), " node '", node.name, "'");
  absl::StatusOr<AttentionDims> dims =
      grad ? GradDims(node.attrs, ctx.input_specs) : ForwardDims(node.attrs, ctx.input_specs);
  if (!dims.ok()) {
    return absl::Status(dims.status().code(), absl::StrCat(where, ": ", dims.status().message()));
  }
  if (IsLowPrecision(dims->dtype)) {
    absl::StatusOr<std::unique_ptr<GpuKernel>> fused = LowerCudnn(ctx, where, *dims, grad);
    // A shape cuDNN's attention does not take (head dimension, device) runs on our kernels.
    if (fused.ok() || !absl::IsUnimplemented(fused.status())) return fused;
  }
  return LowerOwn(ctx, node.name, where, *dims, grad);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCausalAttention(const LoweringContext& ctx,
                                                                const Node& node) {
  return Lower(ctx, node, /*grad=*/false);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCausalAttentionGrad(const LoweringContext& ctx,
                                                                    const Node& node) {
  return Lower(ctx, node, /*grad=*/true);
}

}  // namespace reprise::ops
