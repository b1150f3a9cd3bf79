// conv2d, conv2d_dgrad, conv2d_wgrad: shape rules, gradient rule, CPU reference
// (conv_reference.h) and cuDNN lowering.
#include "src/ops/conv.h"

#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ops/conv_reference.h"
#include "src/ops/conv_shape.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/narrow_conv.h"
#include "src/ops/op_helpers.h"
#include "src/ops/wgrad3x3.h"
#include "src/runtime/add_into_kernel.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

using runtime::ConvKind;
using runtime::ConvShape;

// Shape rules ----------------------------------------------------------------------------------

absl::StatusOr<ConvShape> ShapeOf(ConvKind kind, const Attrs& attrs,
                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  switch (kind) {
    case ConvKind::kForward:
      return Conv2dShape(attrs, in[0], in[1]);
    case ConvKind::kBackwardData:
      return Conv2dDgradShape(attrs, in[0], in[1]);
    case ConvKind::kBackwardFilter:
      return Conv2dWgradShape(attrs, in[0], in[1]);
  }
  return absl::InternalError("unknown convolution kind");
}

template <ConvKind kind>
absl::StatusOr<std::vector<TensorSpec>> InferConv(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const ConvShape s, ShapeOf(kind, attrs, in));
  switch (kind) {
    case ConvKind::kForward:
      return std::vector<TensorSpec>{{ActivationShape(s.layout, s.n, s.k, s.p, s.q), s.dtype}};
    case ConvKind::kBackwardData:
      return std::vector<TensorSpec>{{ActivationShape(s.layout, s.n, s.c, s.h, s.w), s.dtype}};
    case ConvKind::kBackwardFilter:
      return std::vector<TensorSpec>{
          {FilterShape(s.layout, s.k, s.c / s.groups, s.r, s.s), s.dtype}};
  }
  return absl::InternalError("unknown convolution kind");
}

// Gradient rule ---------------------------------------------------------------------------------

// dx = conv2d_dgrad(dy, w) and dw = conv2d_wgrad(x, dy), each with the forward's attributes and
// the extents that dy alone does not determine.
absl::StatusOr<std::vector<Value>> GradConv2d(Graph& g, const Node& node,
                                              absl::Span<const Value> dout,
                                              const std::vector<bool>& needs) {
  const Value x = node.inputs[0], w = node.inputs[1], dy = dout[0];
  ASSIGN_OR_RETURN(const ConvShape s, Conv2dShape(node.attrs, g.spec(x), g.spec(w)));
  std::vector<Value> grads(2);
  if (needs[0]) {
    Attrs attrs = node.attrs;
    attrs["input_h"] = s.h;
    attrs["input_w"] = s.w;
    attrs["role"] = std::string("dgrad");
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(Conv2dDgradOp(), absl::StrCat(node.name, ".dgrad"), {dy, w},
                                        std::move(attrs)));
  }
  if (needs[1]) {
    Attrs attrs = node.attrs;
    attrs["kernel_h"] = s.r;
    attrs["kernel_w"] = s.s;
    attrs["role"] = std::string("wgrad");
    ASSIGN_OR_RETURN(grads[1], g.AddOp1(Conv2dWgradOp(), absl::StrCat(node.name, ".wgrad"), {x, dy},
                                        std::move(attrs)));
  }
  return grads;
}

// CPU reference ---------------------------------------------------------------------------------

// Operands in node order: fwd (x, w) -> y; dgrad (dy, w) -> dx; wgrad (x, dy) -> dw, summed in
// double (which keeps the reference far below fp32's rounding) by conv_reference.h.
template <ConvKind kind>
absl::Status CpuConv(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  const TensorSpec specs[] = {in[0]->spec(), in[1]->spec()};
  ASSIGN_OR_RETURN(const ConvShape shape, ShapeOf(kind, node.attrs, specs));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto a = in[0]->data<T>(), b = in[1]->data<T>();
    std::vector<double> sum;
    if constexpr (std::is_same_v<T, double>) {
      sum = ConvReference(kind, shape, a, b);
    } else {  // Widened once here; the reference reads doubles.
      sum = ConvReference(kind, shape, std::vector<double>(a.begin(), a.end()),
                          std::vector<double>(b.begin(), b.end()));
    }
    auto result = out[0]->data<T>();
    for (size_t i = 0; i < sum.size(); ++i) result[i] = static_cast<T>(sum[i]);
    return absl::OkStatus();
  });
}

// conv2d_dgrad_accumulate and conv2d_dgrad_add: (dy, w, acc) -> acc + dgrad(dy, w).
absl::StatusOr<std::vector<TensorSpec>> InferDgradAccumulate(const Attrs& attrs,
                                                             absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out,
                   InferConv<ConvKind::kBackwardData>(attrs, in.subspan(0, 2)));
  if (in[2] != out[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "acc is ", in[2].ToString(), "; the data gradient it adds to is ", out[0].ToString()));
  }
  return out;
}

// The data gradient, then acc added in T, as conv2d_dgrad followed by add compute it.
absl::Status CpuDgradAccumulate(const Node& node, absl::Span<ir::HostTensor* const> in,
                                absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(CpuConv<ConvKind::kBackwardData>(node, in.subspan(0, 2), out));
  return DispatchFloat(in[2]->dtype(), [&]<typename T>() {
    auto acc = in[2]->data<T>();
    auto y = out[0]->data<T>();
    for (size_t i = 0; i < y.size(); ++i) y[i] = y[i] + acc[i];
    return absl::OkStatus();
  });
}

// GPU lowering ----------------------------------------------------------------------------------

// How a data gradient's sum with a third input is written (conv2d_dgrad_accumulate and
// conv2d_dgrad_add).
enum class DgradSum : uint8_t {
  kNone,     // No sum: conv2d, conv2d_dgrad, conv2d_wgrad.
  kInPlace,  // Over the accumulator, whose memory the output is.
  kApart,    // Into an output of its own.
};

// One cuDNN call with descriptors and algorithm fixed at lowering; Launch only binds the stream.
// With a sum apart, the accumulator is first copied into the output, which the call adds to.
class CudnnConvKernel : public GpuKernel {
 public:
  CudnnConvKernel(std::string where, runtime::CudnnConv conv, const LoweringContext& ctx,
                  DgradSum sum, std::string note)
      : where_(std::move(where)),
        conv_(std::move(conv)),
        note_(std::move(note)),
        sum_(sum),
        cudnn_(ctx.cudnn),
        a_(ctx.inputs[0]),
        b_(ctx.inputs[1]),
        acc_(sum == DgradSum::kApart ? ctx.inputs[2] : nullptr),
        acc_bytes_(sum == DgradSum::kApart ? static_cast<size_t>(ctx.input_specs[2].bytes()) : 0),
        out_(ctx.outputs[0]),
        workspace_(ctx.workspace) {}

  absl::Status Launch(cudaStream_t stream) const override {
    if (acc_ != nullptr) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(out_, acc_, acc_bytes_, cudaMemcpyDeviceToDevice, stream),
          absl::StrCat(where_, ": copying the accumulator into the sum"));
    }
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    return conv_.Run(*cudnn_, a_, b_, out_, workspace_, where_, sum_ != DgradSum::kNone);
  }
  std::string Describe() const override {
    return note_.empty() ? conv_.Describe() : absl::StrCat(conv_.Describe(), " (", note_, ")");
  }
  size_t WorkspaceBytes() const override { return conv_.algorithm().workspace_bytes; }
  // Our kernels after a convolution as dependent launches: ResNet-50 steps 0.5 to 0.7% faster
  // on an H200 (docs/benchmarks.md).
  bool LetsDependentsStartEarly() const override { return true; }

 private:
  std::string where_;  // "node '<name>'", for errors.
  runtime::CudnnConv conv_;
  std::string note_;  // Why the graph API does not run it, where it was asked to.
  DgradSum sum_;      // out += conv where not kNone.
  const runtime::CudnnHandle* cudnn_;
  const void* a_;
  const void* b_;
  const void* acc_;  // Copied into out_ first (kApart).
  size_t acc_bytes_;
  void* out_;
  void* workspace_;
};

// One cuDNN graph-API plan built at lowering; Launch only binds the stream and executes it. A
// data gradient's sum apart whose plan has no fused add (`add_note` says why: strict float32
// NCHW has none) runs the plain plan, then our kernel adds the accumulator in
// (runtime::LaunchAddInto).
class CudnnConvGraphKernel : public GpuKernel {
 public:
  CudnnConvGraphKernel(std::string where, runtime::CudnnConvGraph conv, const LoweringContext& ctx,
                       std::string add_note = "")
      : where_(std::move(where)),
        conv_(std::move(conv)),
        add_note_(std::move(add_note)),
        cudnn_(ctx.cudnn),
        buffers_{
            .a = ctx.inputs[0],
            .b = ctx.inputs[1],
            .out = ctx.outputs[0],
            .acc = conv_.fusion().add_to_output || !add_note_.empty() ? ctx.inputs[2] : nullptr},
        elements_(add_note_.empty() ? 0 : ctx.input_specs[2].NumElements()),
        add_type_(conv_.shape().dtype == DType::kFloat32    ? runtime::AddIntoType::kFloat32
                  : conv_.shape().dtype == DType::kBFloat16 ? runtime::AddIntoType::kBFloat16
                                                            : runtime::AddIntoType::kFloat16),
        workspace_(ctx.workspace) {}

  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    RETURN_IF_ERROR(conv_.Run(*cudnn_, buffers_, workspace_, where_));
    if (add_note_.empty()) return absl::OkStatus();
    return runtime::CudaStatus(
        runtime::LaunchAddInto(buffers_.out, buffers_.acc, static_cast<uint64_t>(elements_),
                               add_type_, stream),
        "add-into kernel launch", where_);
  }
  std::string Describe() const override {
    return add_note_.empty() ? conv_.Describe()
                             : absl::StrCat(conv_.Describe(), " + add kernel (", add_note_, ")");
  }
  size_t WorkspaceBytes() const override { return conv_.workspace_bytes(); }
  bool LetsDependentsStartEarly() const override { return true; }  // As CudnnConvKernel.

 private:
  std::string where_;  // "node '<name>'", for errors.
  runtime::CudnnConvGraph conv_;
  std::string add_note_;  // Why the sum is our kernel's, not the plan's; "" when it is not.
  const runtime::CudnnHandle* cudnn_;
  runtime::ConvGraphBuffers buffers_;
  int64_t elements_;  // The accumulator's (the output's shape), where our kernel adds it.
  runtime::AddIntoType add_type_;
  void* workspace_;
};

// cuDNN's message, cut to 200 characters for a plan dump's line.
std::string Shortened(absl::string_view why) {
  return why.size() > 200 ? absl::StrCat(why.substr(0, 200), " ...") : std::string(why);
}

template <ConvKind kind, DgradSum sum = DgradSum::kNone>
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerConv(const LoweringContext& ctx, const Node& node) {
  std::string where = absl::StrCat("node '", node.name, "'");
  absl::StatusOr<ConvShape> checked =
      ShapeOf(kind, node.attrs, absl::MakeConstSpan(ctx.input_specs).subspan(0, 2));
  if (!checked.ok()) {
    return absl::Status(checked.status().code(),
                        absl::StrCat(where, ": ", checked.status().message()));
  }
  const ConvShape& shape = *checked;
  if (shape.dtype != DType::kFloat32 && !IsLowPrecision(shape.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": ", node.op_name(), " runs on the GPU in float32, bfloat16 or float16, got ",
        DTypeName(shape.dtype)));
  }
  // Inputs of a few channels (a network's stem) run as our own kernels where they apply; where
  // their partial sums do not fit the lane's workspace, cuDNN's algorithms are chosen under the
  // same limit instead. The plan dump names what each convolution runs.
  if (ctx.options.narrow_convolutions && sum == DgradSum::kNone &&
      (kind == ConvKind::kForward || kind == ConvKind::kBackwardFilter) &&
      NarrowConvApplies(shape, ctx.options.allow_tf32).ok()) {
    absl::StatusOr<std::unique_ptr<GpuKernel>> narrow =
        LowerNarrowConv(ctx, node.name, kind, shape);
    if (narrow.ok() || !absl::IsResourceExhausted(narrow.status())) return narrow;
  }
  // 3x3 weight gradients of wide images likewise, where asked
  // (TrainOptions::kernels.own_weight_gradients says why it is off by default).
  if (ctx.options.own_weight_gradients && kind == ConvKind::kBackwardFilter &&
      Wgrad3x3Applies(shape, ctx.options.allow_tf32).ok()) {
    absl::StatusOr<std::unique_ptr<GpuKernel>> own = LowerWgrad3x3(ctx, node.name, shape);
    if (own.ok() || !absl::IsResourceExhausted(own.status())) return own;
  }
  if (ctx.cudnn == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": ", node.op_name(), " needs a cuDNN handle to lower"));
  }
  // Where the graph API has no plan (no engine passes the options' filters), the legacy call
  // runs, and its description says why. A data gradient added to its accumulator and written over
  // it (conv2d_dgrad_accumulate, whose output is its third input's memory) stays on the legacy
  // call, whose beta = 1 is documented to blend in place: the graph API's epilogue reading the
  // tensor its output aliases is not promised for every engine (split or multi-pass ones; PyTorch
  // met cuDNN's fused convolution + add going wrong when the added tensor aliased an operand,
  // pytorch#62926), and with it a bfloat16 ResNet-50's losses left the legacy API's at the second
  // step (H200, 2026-12-02). Unless asked (kernels.conv_sums_in_place), the fuse pass gives
  // the graph API conv2d_dgrad_add instead, whose sum has memory of its own
  // (tests/gpu/resnet50_conv_graph_gpu_test.cc checks each of ResNet-50's shapes in place and
  // into another output).
  std::string note;
  if (ctx.options.conv_api == LoweringOptions::ConvApi::kGraph && sum == DgradSum::kInPlace) {
    note =
        "graph API: the sum is written over its accumulator, an in-place epilogue cuDNN's graph "
        "API does not promise; the legacy call's beta = 1 does";
  } else if (ctx.options.conv_api == LoweringOptions::ConvApi::kGraph) {
    const bool add = sum == DgradSum::kApart;
    runtime::ConvGraphOptions options{.allow_tf32 = ctx.options.allow_tf32,
                                      .deterministic = ctx.options.deterministic,
                                      .workspace_limit = ctx.workspace_bytes,
                                      .device = DeviceChoiceKey(ctx.device),
                                      .measure = ctx.options.measure_conv_algorithms,
                                      .measure_buffers = {.a = ctx.inputs[0],
                                                          .b = ctx.inputs[1],
                                                          .out = ctx.outputs[0],
                                                          .acc = add ? ctx.inputs[2] : nullptr},
                                      .measure_workspace = ctx.workspace,
                                      .records = ctx.kernels};
    absl::StatusOr<runtime::CudnnConvGraph> conv = runtime::CudnnConvGraph::Create(
        *ctx.cudnn, kind, shape, {.add_to_output = add}, options, where);
    std::string add_note;
    if (add && absl::IsUnimplemented(conv.status())) {
      // No fused add (strict float32 NCHW has none): the plain plan, and our kernel adds.
      add_note = absl::StrCat("no fused add plan: ", Shortened(conv.status().message()));
      options.measure_buffers.acc = nullptr;
      conv = runtime::CudnnConvGraph::Create(*ctx.cudnn, kind, shape, {}, options, where);
    }
    if (conv.ok()) {
      return std::unique_ptr<GpuKernel>(
          new CudnnConvGraphKernel(std::move(where), *std::move(conv), ctx, std::move(add_note)));
    }
    if (!absl::IsUnimplemented(conv.status())) return conv.status();
    note = absl::StrCat("graph API: ", Shortened(conv.status().message()));
  }
  const runtime::ConvOptions options{.allow_tf32 = ctx.options.allow_tf32,
                                     .deterministic = ctx.options.deterministic,
                                     .measure = ctx.options.measure_conv_algorithms,
                                     .workspace_limit = ctx.workspace_bytes,
                                     .device = DeviceChoiceKey(ctx.device),
                                     .records = ctx.kernels};
  const runtime::CudnnConv::Buffers buffers{ctx.inputs[0], ctx.inputs[1], ctx.outputs[0],
                                            ctx.workspace};
  ASSIGN_OR_RETURN(runtime::CudnnConv conv,
                   runtime::CudnnConv::Create(*ctx.cudnn, kind, shape, options, buffers, where));
  return std::unique_ptr<GpuKernel>(
      new CudnnConvKernel(std::move(where), std::move(conv), ctx, sum, std::move(note)));
}

}  // namespace

const ir::OpDef& Conv2dOp() {
  static const ir::OpDef op{.name = "conv2d",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferConv<ConvKind::kForward>,
                            .grad = GradConv2d,
                            .cpu = CpuConv<ConvKind::kForward>,
                            .lower = LowerConv<ConvKind::kForward>,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& Conv2dDgradOp() {
  static const ir::OpDef op{.name = "conv2d_dgrad",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferConv<ConvKind::kBackwardData>,
                            .cpu = CpuConv<ConvKind::kBackwardData>,
                            .lower = LowerConv<ConvKind::kBackwardData>,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& Conv2dDgradAccumulateOp() {
  static const ir::OpDef op{.name = "conv2d_dgrad_accumulate",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferDgradAccumulate,
                            .cpu = CpuDgradAccumulate,
                            .lower = LowerConv<ConvKind::kBackwardData, DgradSum::kInPlace>,
                            .output_overwrites_input = 2,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& Conv2dDgradAddOp() {
  static const ir::OpDef op{.name = "conv2d_dgrad_add",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferDgradAccumulate,
                            .cpu = CpuDgradAccumulate,
                            .lower = LowerConv<ConvKind::kBackwardData, DgradSum::kApart>,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& Conv2dWgradOp() {
  static const ir::OpDef op{.name = "conv2d_wgrad",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferConv<ConvKind::kBackwardFilter>,
                            .cpu = CpuConv<ConvKind::kBackwardFilter>,
                            .lower = LowerConv<ConvKind::kBackwardFilter>,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
