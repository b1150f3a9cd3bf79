// conv2d_bn_train: shape rule, CPU reference (the references of the ops it replaces) and the GPU
// lowering, fused through cuDNN's graph API where it has a plan, else the separate lowerings.
#include "src/ops/conv_bn.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ir/low_precision.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/ops/conv.h"
#include "src/ops/conv_bn_finalize.h"
#include "src/ops/conv_shape.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/narrow_conv.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

bool HasRelu(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "relu", false); }
bool HasResidual(const Attrs& attrs) { return ir::BoolAttrOr(attrs, "residual", false); }

// The batch-norm op the node's second half is.
const ir::OpDef& BatchNormPart(const Attrs& attrs) {
  return HasRelu(attrs) ? BatchNormActTrainOp() : BatchNormTrainOp();
}

absl::StatusOr<std::vector<TensorSpec>> Infer(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  if (HasResidual(attrs) && !HasRelu(attrs)) {
    return absl::InvalidArgumentError("a residual add is fused only before a ReLU (relu = true)");
  }
  RETURN_IF_ERROR(CheckArity(in, HasResidual(attrs) ? 7 : 6));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> conv, Conv2dOp().infer(attrs, in.subspan(0, 2)));
  std::vector<TensorSpec> bn_in = {conv[0], in[2], in[3], in[4], in[5]};
  if (HasResidual(attrs)) bn_in.push_back(in[6]);
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, BatchNormPart(attrs).infer(attrs, bn_in));
  out.push_back(conv[0]);
  return out;
}

absl::Status Cpu(const Node& node, absl::Span<ir::HostTensor* const> in,
                 absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(Conv2dOp().cpu(node, in.subspan(0, 2), out.subspan(3, 1)));
  // The reference executor runs a 16-bit node through float32, rounding only its outputs: the
  // convolution's output is rounded to its dtype here, before the batch norm reads it, as the
  // separate ops store it.
  const DType stored = node.outputs.size() == 4 ? node.outputs[3].dtype : out[3]->dtype();
  RETURN_IF_ERROR(ir::RoundToStored(stored, *out[3]));
  std::vector<ir::HostTensor*> bn_in = {out[3], in[2], in[3], in[4], in[5]};
  if (HasResidual(node.attrs)) bn_in.push_back(in[6]);
  return BatchNormPart(node.attrs).cpu(node, absl::MakeSpan(bn_in), out.subspan(0, 3));
}

// GPU lowering ----------------------------------------------------------------------------------

// The forward convolution with its output's per-channel sums (float32, in the workspace).
class ConvStatsKernel : public GpuKernel {
 public:
  ConvStatsKernel(std::string where, runtime::CudnnConvGraph conv,
                  const runtime::CudnnHandle* cudnn, runtime::ConvGraphBuffers buffers,
                  void* workspace)
      : where_(std::move(where)),
        conv_(std::move(conv)),
        cudnn_(cudnn),
        buffers_(buffers),
        workspace_(workspace) {}
  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    return conv_.Run(*cudnn_, buffers_, workspace_, where_);
  }
  std::string Describe() const override { return conv_.Describe(); }

 private:
  std::string where_;
  runtime::CudnnConvGraph conv_;
  const runtime::CudnnHandle* cudnn_;
  runtime::ConvGraphBuffers buffers_;
  void* workspace_;
};

class FinalizeKernel : public GpuKernel {
 public:
  FinalizeKernel(std::string where, const BatchNormFinalizeArgs& args)
      : where_(std::move(where)), args_(args) {}
  absl::Status Launch(cudaStream_t stream) const override {
    CUDA_RETURN_IF_ERROR(LaunchBatchNormFinalize(args_, stream), where_);
    return absl::OkStatus();
  }
  std::string Describe() const override {
    return absl::StrCat("bn finalize from conv stats (", args_.channels, " channels)");
  }

 private:
  std::string where_;
  BatchNormFinalizeArgs args_;
};

// The separate lowerings, described with why they run instead of the fused one.
class Unfused : public GpuKernel {
 public:
  Unfused(std::string why, std::unique_ptr<GpuKernel> kernels)
      : why_(std::move(why)), kernels_(std::move(kernels)) {}
  absl::Status Launch(cudaStream_t stream) const override { return kernels_->Launch(stream); }
  std::string Describe() const override {
    return absl::StrCat("unfused (", why_, "): ", kernels_->Describe());
  }
  std::vector<std::string> GeneratedKernelNames() const override {
    return kernels_->GeneratedKernelNames();
  }
  size_t WorkspaceBytes() const override { return kernels_->WorkspaceBytes(); }
  bool LetsDependentsStartEarly() const override { return kernels_->LetsDependentsStartEarly(); }
  void SetDependentStart(bool allowed) override { kernels_->SetDependentStart(allowed); }

 private:
  std::string why_;
  std::unique_ptr<GpuKernel> kernels_;
};

// Bytes of the workspace the two float32 sums take, ahead of the convolution's own workspace.
size_t StatsBytes(int64_t channels) {
  return (2 * static_cast<size_t>(channels) * sizeof(float) + 255) / 256 * 256;
}

// The fused form, or Unimplemented / ResourceExhausted saying why it does not apply.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerFused(const LoweringContext& ctx, const Node& node,
                                                      const runtime::ConvShape& shape) {
  const std::string where = absl::StrCat("node '", node.name, "'");
  RETURN_IF_ERROR(ConvBatchNormStatsSupport(shape.layout, shape.dtype, shape.c, shape.k));
  if (ctx.options.deterministic) {
    // The engine cuDNN 9.19 runs for it on an H200 carries no nondeterministic note, yet its
    // sums differ run to run (the first loss of a captured ResNet-18 and of its eager twin
    // differed): deterministic training keeps the convolution and the statistics apart.
    return absl::UnimplementedError(
        "deterministic: cuDNN's statistics epilogue does not give the same sums on every run");
  }
  for (int i = 2; i < 6; ++i) {
    if (ctx.input_specs[i].dtype != DType::kFloat32) {
      return absl::UnimplementedError("per-channel tensors must be float32");
    }
  }
  if (ctx.cudnn == nullptr) return absl::UnimplementedError("no cuDNN handle");
  // A stem's few input channels run faster on our own kernel than on cuDNN's.
  if (ctx.options.narrow_convolutions && NarrowConvApplies(shape, ctx.options.allow_tf32).ok()) {
    return absl::UnimplementedError("the convolution runs as our narrow-input kernel");
  }
  const size_t stats_bytes = StatsBytes(shape.k);
  if (ctx.workspace_bytes < stats_bytes || ctx.workspace == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the sums need ", stats_bytes, " bytes of workspace; the lane has ", ctx.workspace_bytes));
  }
  char* const workspace = static_cast<char*>(ctx.workspace);
  float* const sum = reinterpret_cast<float*>(workspace);
  float* const sq_sum = sum + shape.k;
  const runtime::ConvGraphBuffers buffers{
      .a = ctx.inputs[0], .b = ctx.inputs[1], .out = ctx.outputs[3], .sum = sum, .sq_sum = sq_sum};
  const runtime::ConvGraphOptions options{.allow_tf32 = ctx.options.allow_tf32,
                                          .deterministic = ctx.options.deterministic,
                                          .workspace_limit = ctx.workspace_bytes - stats_bytes,
                                          .device = DeviceChoiceKey(ctx.device),
                                          .measure = ctx.options.measure_conv_algorithms,
                                          .measure_buffers = buffers,
                                          .measure_workspace = workspace + stats_bytes,
                                          .records = ctx.kernels};
  ASSIGN_OR_RETURN(runtime::CudnnConvGraph conv,
                   runtime::CudnnConvGraph::Create(*ctx.cudnn, runtime::ConvKind::kForward, shape,
                                                   {.output_stats = true}, options, ""));
  const size_t conv_workspace = conv.workspace_bytes();
  std::vector<std::unique_ptr<GpuKernel>> parts;
  parts.push_back(
      std::make_unique<ConvStatsKernel>(where, std::move(conv), ctx.cudnn, buffers,
                                        conv_workspace > 0 ? workspace + stats_bytes : nullptr));
  const double epsilon =
      node.attrs.contains("epsilon") ? *ir::FloatAttr(node.attrs, "epsilon") : 1e-5;
  const double momentum =
      node.attrs.contains("momentum") ? *ir::FloatAttr(node.attrs, "momentum") : 0.1;
  const int64_t rows = shape.n * shape.p * shape.q;
  if (rows < 2) {
    return absl::UnimplementedError("batch statistics need at least 2 values per channel");
  }
  parts.push_back(std::make_unique<FinalizeKernel>(
      where, BatchNormFinalizeArgs{.sum = sum,
                                   .sq_sum = sq_sum,
                                   .saved_mean = static_cast<float*>(ctx.outputs[1]),
                                   .saved_invstd = static_cast<float*>(ctx.outputs[2]),
                                   .running_mean = static_cast<float*>(ctx.inputs[4]),
                                   .running_var = static_cast<float*>(ctx.inputs[5]),
                                   .channels = shape.k,
                                   .rows = rows,
                                   .epsilon = epsilon,
                                   .momentum = momentum}));
  NhwcBatchNormRecompute apply{.x = ctx.outputs[3],
                               .gamma = static_cast<const float*>(ctx.inputs[2]),
                               .beta = static_cast<const float*>(ctx.inputs[3]),
                               .saved_mean = static_cast<const float*>(ctx.outputs[1]),
                               .saved_invstd = static_cast<const float*>(ctx.outputs[2]),
                               .residual = HasResidual(node.attrs) ? ctx.inputs[6] : nullptr,
                               .y = ctx.outputs[0],
                               .rows = rows,
                               .channels = shape.k,
                               .plane = shape.layout == Layout::kNCHW ? shape.p * shape.q : 0,
                               .relu = HasRelu(node.attrs),
                               .dtype = shape.dtype};
  ASSIGN_OR_RETURN(parts.emplace_back(), LowerNhwcBatchNormRecompute(ctx, node.name, apply));
  return std::unique_ptr<GpuKernel>(
      new KernelSequence(std::move(parts), stats_bytes + conv_workspace));
}

// The convolution's lowering, then the batch norm's, one after the other on the lane.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSeparately(const LoweringContext& ctx,
                                                           const Node& node) {
  Node conv = node;
  conv.op = &Conv2dOp();
  LoweringContext conv_ctx = ctx;
  conv_ctx.input_specs = {ctx.input_specs[0], ctx.input_specs[1]};
  conv_ctx.inputs = {ctx.inputs[0], ctx.inputs[1]};
  conv_ctx.outputs = {ctx.outputs[3]};
  Node bn = node;
  bn.op = &BatchNormPart(node.attrs);
  LoweringContext bn_ctx = ctx;
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> conv_out,
                   Conv2dOp().infer(node.attrs, conv_ctx.input_specs));
  bn_ctx.input_specs = {conv_out[0], ctx.input_specs[2], ctx.input_specs[3], ctx.input_specs[4],
                        ctx.input_specs[5]};
  bn_ctx.inputs = {ctx.outputs[3], ctx.inputs[2], ctx.inputs[3], ctx.inputs[4], ctx.inputs[5]};
  if (HasResidual(node.attrs)) {
    bn_ctx.input_specs.push_back(ctx.input_specs[6]);
    bn_ctx.inputs.push_back(ctx.inputs[6]);
  }
  bn_ctx.outputs = {ctx.outputs[0], ctx.outputs[1], ctx.outputs[2]};
  std::vector<std::unique_ptr<GpuKernel>> parts;
  ASSIGN_OR_RETURN(parts.emplace_back(), Conv2dOp().lower(conv_ctx, conv));
  ASSIGN_OR_RETURN(parts.emplace_back(), bn.op->lower(bn_ctx, bn));
  const size_t workspace = std::max(parts[0]->WorkspaceBytes(), parts[1]->WorkspaceBytes());
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(parts), workspace));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node) {
  const std::string where = absl::StrCat("node '", node.name, "'");
  absl::StatusOr<runtime::ConvShape> shape =
      Conv2dShape(node.attrs, ctx.input_specs[0], ctx.input_specs[1]);
  if (!shape.ok()) {
    return absl::Status(shape.status().code(), absl::StrCat(where, ": ", shape.status().message()));
  }
  absl::StatusOr<std::unique_ptr<GpuKernel>> fused = LowerFused(ctx, node, *shape);
  if (fused.ok()) return fused;
  if (!absl::IsUnimplemented(fused.status()) && !absl::IsResourceExhausted(fused.status())) {
    return absl::Status(fused.status().code(), absl::StrCat(where, ": ", fused.status().message()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> separate, LowerSeparately(ctx, node));
  // The frontend's own message can be long (it lists every engine's refusal): the dump keeps
  // its start.
  std::string why(fused.status().message());
  if (why.size() > 240) why = absl::StrCat(why.substr(0, 240), " ...");
  return std::unique_ptr<GpuKernel>(new Unfused(std::move(why), std::move(separate)));
}

}  // namespace

absl::Status ConvBatchNormStatsSupport(Layout layout, DType dtype, int64_t input_channels,
                                       int64_t output_channels) {
  if (dtype != DType::kFloat16) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN sums batch-norm statistics in a convolution's epilogue for float16 data only, not ",
        DTypeName(dtype)));
  }
  if (layout != Layout::kNHWC) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN sums batch-norm statistics in a convolution's epilogue for NHWC data only, not ",
        LayoutName(layout)));
  }
  if (input_channels % 8 != 0 || output_channels % 8 != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN's fused convolution with batch-norm statistics takes channel counts that are "
        "multiples of 8, not ",
        input_channels, " to ", output_channels));
  }
  return absl::OkStatus();
}

const ir::OpDef& Conv2dBatchNormTrainOp() {
  static const ir::OpDef op{.name = "conv2d_bn_train",
                            .kind = ir::OpKind::kMatmul,
                            .infer = Infer,
                            .cpu = Cpu,
                            .lower = Lower,
                            .mutated_inputs = {4, 5},
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
