// layer_norm and layer_norm_grad: shape rules, gradient rule, double-accumulating CPU references
// and GPU lowerings on our own kernels (src/codegen/layer_norm_kernels.h).
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/layer_norm_backward_kernels.h"
#include "src/codegen/layer_norm_kernels.h"
#include "src/codegen/vector16.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/row_kernel_choice.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<double> EpsilonOf(const Attrs& attrs) {
  double epsilon = 1e-5;
  if (attrs.contains("epsilon")) {
    ASSIGN_OR_RETURN(epsilon, ir::FloatAttr(attrs, "epsilon"));
  }
  if (!std::isfinite(epsilon) || epsilon < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon must be finite and non-negative, got ", epsilon));
  }
  return epsilon;
}

// x [..., C] as rows of C values.
struct Rows {
  int64_t rows = 0, cols = 0;
};

absl::StatusOr<Rows> RowsOf(const TensorSpec& x) {
  RETURN_IF_ERROR(CheckFloat(x, "x"));
  if (x.shape.rank() < 1 || x.NumElements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must have at least one dimension and elements, got ", x.ToString()));
  }
  const int64_t cols = x.shape.dim(x.shape.rank() - 1);
  return Rows{x.NumElements() / cols, cols};
}

// InvalidArgument unless `v` is [C] of x's dtype, or float32 beside 16-bit x.
absl::Status CheckPerColumn(const TensorSpec& v, const TensorSpec& x, const Rows& r,
                            absl::string_view what) {
  const bool dtype_fits =
      v.dtype == x.dtype || (IsLowPrecision(x.dtype) && v.dtype == DType::kFloat32);
  if (v.shape.rank() != 1 || v.shape.dim(0) != r.cols || !dtype_fits) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", TensorSpec{Shape{r.cols}, x.dtype}.ToString(),
                     " (one value per element of the last dimension of x ", x.ToString(), "), got ",
                     v.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckPerRow(const TensorSpec& v, const TensorSpec& weight, const Rows& r,
                         absl::string_view what) {
  if (!(v == TensorSpec{Shape{r.rows}, weight.dtype})) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", TensorSpec{Shape{r.rows}, weight.dtype}.ToString(),
                     " (one value per row of x), got ", v.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferForward(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(EpsilonOf(attrs).status());
  ASSIGN_OR_RETURN(Rows r, RowsOf(in[0]));
  RETURN_IF_ERROR(CheckPerColumn(in[1], in[0], r, "weight"));
  RETURN_IF_ERROR(CheckPerColumn(in[2], in[0], r, "bias"));
  if (in[1].dtype != in[2].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", in[1].ToString(), " and bias ",
                                                   in[2].ToString(), " must share a dtype"));
  }
  const TensorSpec per_row{Shape{r.rows}, in[1].dtype};
  return std::vector<TensorSpec>{in[0], per_row, per_row};
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 5));
  RETURN_IF_ERROR(EpsilonOf(attrs).status());
  ASSIGN_OR_RETURN(Rows r, RowsOf(in[1]));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " must match x ", in[1].ToString()));
  }
  RETURN_IF_ERROR(CheckPerColumn(in[2], in[1], r, "weight"));
  RETURN_IF_ERROR(CheckPerRow(in[3], in[2], r, "mean"));
  RETURN_IF_ERROR(CheckPerRow(in[4], in[2], r, "rstd"));
  return std::vector<TensorSpec>{in[1], in[2], in[2]};
}

absl::StatusOr<std::vector<Value>> GradForward(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  if (dout[1].valid() || dout[2].valid()) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name,
        "': a gradient flows into mean or rstd of layer_norm, which have no gradient rule"));
  }
  std::vector<Value> grads(3);
  if (!dout[0].valid() || !(needs[0] || needs[1] || needs[2])) return grads;
  ASSIGN_OR_RETURN(
      std::vector<Value> d,
      g.AddOp(LayerNormGradOp(), absl::StrCat(node.name, ".grad"),
              {dout[0], node.inputs[0], node.inputs[1], Value{node.id, 1}, Value{node.id, 2}},
              node.attrs));
  for (int i = 0; i < 3; ++i) {
    if (needs[i]) grads[i] = d[i];
  }
  return grads;
}

absl::Status CpuForward(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const double epsilon, EpsilonOf(node.attrs));
  ASSIGN_OR_RETURN(const Rows r, RowsOf(in[0]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), w = in[1]->data<T>(), b = in[2]->data<T>();
    auto y = out[0]->data<T>(), mean_out = out[1]->data<T>(), rstd_out = out[2]->data<T>();
    for (int64_t row = 0; row < r.rows; ++row) {
      const T* xr = x.data() + row * r.cols;
      double sum = 0, squares = 0;
      for (int64_t c = 0; c < r.cols; ++c) sum += xr[c];
      const double mean = sum / r.cols;
      for (int64_t c = 0; c < r.cols; ++c) squares += (xr[c] - mean) * (xr[c] - mean);
      const double rstd = 1.0 / std::sqrt(squares / r.cols + epsilon);
      for (int64_t c = 0; c < r.cols; ++c) {
        y[row * r.cols + c] = static_cast<T>((xr[c] - mean) * rstd * w[c] + b[c]);
      }
      mean_out[row] = static_cast<T>(mean);
      rstd_out[row] = static_cast<T>(rstd);
    }
    return absl::OkStatus();
  });
}

absl::Status CpuGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Rows r, RowsOf(in[1]->spec()));
  return DispatchFloat(in[1]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>(), x = in[1]->data<T>(), w = in[2]->data<T>();
    absl::Span<const T> mean = in[3]->data<T>(), rstd = in[4]->data<T>();
    auto dx = out[0]->data<T>(), dw = out[1]->data<T>(), db = out[2]->data<T>();
    std::vector<double> sum_w(r.cols, 0.0), sum_b(r.cols, 0.0);
    for (int64_t row = 0; row < r.rows; ++row) {
      const int64_t base = row * r.cols;
      const double m = mean[row], s = rstd[row];
      double sum_g = 0, sum_gx = 0;
      for (int64_t c = 0; c < r.cols; ++c) {
        const double g = static_cast<double>(dy[base + c]) * w[c];
        const double xhat = (x[base + c] - m) * s;
        sum_g += g;
        sum_gx += g * xhat;
        sum_w[c] += dy[base + c] * xhat;
        sum_b[c] += dy[base + c];
      }
      const double mean_g = sum_g / r.cols, mean_gx = sum_gx / r.cols;
      for (int64_t c = 0; c < r.cols; ++c) {
        const double g = static_cast<double>(dy[base + c]) * w[c];
        const double xhat = (x[base + c] - m) * s;
        dx[base + c] = static_cast<T>(s * (g - mean_g - xhat * mean_gx));
      }
    }
    for (int64_t c = 0; c < r.cols; ++c) {
      dw[c] = static_cast<T>(sum_w[c]);
      db[c] = static_cast<T>(sum_b[c]);
    }
    return absl::OkStatus();
  });
}

absl::Status CheckKernelStore(const LoweringContext& ctx, const Node& node) {
  if (ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " needs a kernel store, and the plan has none"));
  }
  return absl::OkStatus();
}

dim3 RowGrid(int64_t rows) {
  return dim3(static_cast<unsigned>((rows + codegen::kLayerNormRowsPerBlock - 1) /
                                    codegen::kLayerNormRowsPerBlock));
}
constexpr int kRowBlock = 32 * codegen::kLayerNormRowsPerBlock;

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerForward(const LoweringContext& ctx,
                                                        const Node& node) {
  ASSIGN_OR_RETURN(const double epsilon, EpsilonOf(node.attrs));
  // x in float32 or a 16-bit type; weight and bias float32 (what mixed precision keeps).
  ASSIGN_OR_RETURN(const DType dtype, NhwcDataType(node, ctx.input_specs, {0}));
  ASSIGN_OR_RETURN(const Rows r, RowsOf(ctx.input_specs[0]));
  RETURN_IF_ERROR(CheckKernelStore(ctx, node));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]);
  args.Add(ctx.outputs[0]).Add(ctx.outputs[1]).Add(ctx.outputs[2]);
  args.Add(static_cast<long long>(r.rows))
      .Add(static_cast<int>(r.cols))
      .Add(static_cast<float>(epsilon));
  const bool vec = codegen::LayerNormVectorizes(
      r.cols, {ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]});
  return NvrtcKernel::Create(
      ctx, node.name, vec ? codegen::LayerNormForwardVec(dtype) : codegen::LayerNormForward(dtype),
      RowGrid(r.rows), dim3(kRowBlock), 0, std::move(args));
}

absl::Status CheckScratch(const LoweringContext& ctx, const Node& node, const Rows& r,
                          int64_t bytes) {
  if (ctx.workspace == nullptr || static_cast<size_t>(bytes) > ctx.workspace_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(), " rows=", r.rows, " cols=", r.cols,
                     " needs ", bytes, " bytes of scratch in the lane's workspace, which has ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  return absl::OkStatus();
}

// Two launches (src/codegen/layer_norm_backward_kernels.h): dx (plus the residual gradient,
// input 5, with `add`) and per-block partial parameter sums in one pass over the rows, then
// their fixed-order total. With `sum` (the warp form only), dx's column sums too, into output 3.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerOnePassGrad(
    const LoweringContext& ctx, const Node& node, bool add, DType dtype, const Rows& r,
    const codegen::LayerNormBackwardLaunch& l, bool sum) {
  const int64_t partial_bytes = sum ? l.partial_bytes_with_sum() : l.partial_bytes;
  RETURN_IF_ERROR(CheckScratch(ctx, node, r, partial_bytes));
  RETURN_IF_ERROR(CheckKernelStore(ctx, node));
  void* partial = ctx.workspace;
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  KernelArgs args;
  for (int i = 0; i < (add ? 6 : 5); ++i) args.Add(ctx.inputs[i]);
  args.Add(ctx.outputs[0]).Add(partial);
  args.Add(static_cast<long long>(r.rows)).Add(static_cast<int>(r.cols)).Add(l.team);
  args.Add(static_cast<long long>(l.rows_per_chunk));
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(
                       ctx, node.name,
                       sum ? codegen::LayerNormBackwardWithSum(dtype, add, l.lane_vectors)
                           : codegen::LayerNormBackwardWith(dtype, add, l.lane_vectors),
                       dim3(static_cast<unsigned>(l.chunks)), dim3(l.block()), 0, std::move(args)));
  KernelArgs total_args;
  total_args.Add(partial).Add(static_cast<int>(l.chunks)).Add(static_cast<int>(r.cols));
  total_args.Add(ctx.outputs[1]).Add(ctx.outputs[2]);
  if (sum) total_args.Add(ctx.outputs[3]);
  ASSIGN_OR_RETURN(
      kernels.emplace_back(),
      NvrtcKernel::Create(
          ctx, node.name,
          sum ? codegen::LayerNormParamTotalWithSum(dtype) : codegen::LayerNormParamTotal(),
          dim3(static_cast<unsigned>((r.cols + 31) / 32), sum ? 3 : 2),
          dim3(32, codegen::kLayerNormTotalRowThreads), 0, std::move(total_args)));
  return std::unique_ptr<GpuKernel>(
      new KernelSequence(std::move(kernels), static_cast<size_t>(partial_bytes)));
}

// The one-pass kernels apply: the width splits into 16-byte vectors (a team or warp form exists),
// the tensors are aligned, and the two-pass kernels are not forced.
bool OnePassApplies(const LoweringContext& ctx, bool add,
                    const codegen::LayerNormBackwardLaunch& l) {
  return l.team > 0 && !TwoPassRowKernelsForced() &&
         codegen::Aligned16({ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0],
                             add ? ctx.inputs[5] : nullptr});
}

absl::StatusOr<DType> GradDataType(const LoweringContext& ctx, const Node& node, bool add) {
  return NhwcDataType(node, ctx.input_specs,
                      add ? std::vector<int>{0, 1, 5} : std::vector<int>{0, 1});
}

// The one-pass kernels where the width splits into 16-byte vectors and the tensors are aligned
// (unless TwoPassRowKernelsForced); else three launches: dx per row (plus the residual gradient,
// input 5, with `add`), then the parameter gradients as per-chunk partial column sums (in the
// lane's workspace) and their fixed-order total.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGradOf(const LoweringContext& ctx, const Node& node,
                                                       bool add) {
  ASSIGN_OR_RETURN(const DType dtype, GradDataType(ctx, node, add));
  ASSIGN_OR_RETURN(const Rows r, RowsOf(ctx.input_specs[1]));
  const codegen::LayerNormBackwardLaunch one_pass =
      codegen::LayerNormBackwardLaunchFor(r.rows, r.cols, dtype);
  if (OnePassApplies(ctx, add, one_pass)) {
    return LowerOnePassGrad(ctx, node, add, dtype, r, one_pass, /*sum=*/false);
  }
  const codegen::LayerNormChunking k = codegen::LayerNormChunkingFor(r.rows, r.cols);
  RETURN_IF_ERROR(CheckScratch(ctx, node, r, k.partial_bytes));
  RETURN_IF_ERROR(CheckKernelStore(ctx, node));
  void* partial = ctx.workspace;
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  KernelArgs dx_args;
  dx_args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.inputs[3]);
  dx_args.Add(ctx.inputs[4]);
  if (add) dx_args.Add(ctx.inputs[5]);
  dx_args.Add(ctx.outputs[0]);
  dx_args.Add(static_cast<long long>(r.rows)).Add(static_cast<int>(r.cols));
  std::vector<const void*> vectorized = {ctx.inputs[0], ctx.inputs[1], ctx.inputs[2],
                                         ctx.outputs[0]};
  if (add) vectorized.push_back(ctx.inputs[5]);
  const bool vec = codegen::LayerNormVectorizes(r.cols, vectorized);
  codegen::GeneratedKernel dx_kernel =
      vec ? (add ? codegen::LayerNormDxAddVec(dtype) : codegen::LayerNormDxVec(dtype))
          : (add ? codegen::LayerNormDxAdd(dtype) : codegen::LayerNormDx(dtype));
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(ctx, node.name, std::move(dx_kernel), RowGrid(r.rows),
                                       dim3(kRowBlock), 0, std::move(dx_args)));
  KernelArgs partial_args;
  partial_args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[3]).Add(ctx.inputs[4]);
  partial_args.Add(partial).Add(static_cast<long long>(r.rows)).Add(static_cast<int>(r.cols));
  partial_args.Add(static_cast<long long>(k.rows_per_chunk));
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(ctx, node.name, codegen::LayerNormParamPartials(dtype),
                                       dim3(static_cast<unsigned>((r.cols + 31) / 32),
                                            static_cast<unsigned>(k.chunks)),
                                       dim3(32, 8), 0, std::move(partial_args)));
  KernelArgs final_args;
  final_args.Add(partial).Add(static_cast<int>(k.chunks)).Add(static_cast<int>(r.cols));
  final_args.Add(ctx.outputs[1]).Add(ctx.outputs[2]);
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(ctx, node.name, codegen::LayerNormParamFinalize(),
                                       dim3(static_cast<unsigned>((r.cols + 255) / 256)), dim3(256),
                                       0, std::move(final_args)));
  return std::unique_ptr<GpuKernel>(
      new KernelSequence(std::move(kernels), static_cast<size_t>(k.partial_bytes)));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGrad(const LoweringContext& ctx, const Node& node) {
  return LowerGradOf(ctx, node, /*add=*/false);
}

// add_layer_norm: (a, b, weight, bias) -> (x = a + b, y, mean, rstd), add's then layer_norm's.
absl::StatusOr<std::vector<TensorSpec>> InferAddForward(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 4));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", in[0].ToString(), " and b ", in[1].ToString(), " must match"));
  }
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, InferForward(attrs, in.subspan(1, 3)));
  out.insert(out.begin(), in[0]);
  return out;
}

absl::Status CpuAddForward(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  const Node stub;
  RETURN_IF_ERROR(AddOp().cpu(stub, in.subspan(0, 2), out.subspan(0, 1)));
  std::vector<ir::HostTensor*> ln_in = {out[0], in[2], in[3]};
  return CpuForward(node, ln_in, out.subspan(1, 3));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAddForward(const LoweringContext& ctx,
                                                           const Node& node) {
  ASSIGN_OR_RETURN(const double epsilon, EpsilonOf(node.attrs));
  ASSIGN_OR_RETURN(const DType dtype, NhwcDataType(node, ctx.input_specs, {0, 1}));
  ASSIGN_OR_RETURN(const Rows r, RowsOf(ctx.input_specs[0]));
  RETURN_IF_ERROR(CheckKernelStore(ctx, node));
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  for (void* p : ctx.outputs) args.Add(p);
  args.Add(static_cast<long long>(r.rows))
      .Add(static_cast<int>(r.cols))
      .Add(static_cast<float>(epsilon));
  const bool vec = codegen::LayerNormVectorizes(
      r.cols,
      {ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.inputs[3], ctx.outputs[0], ctx.outputs[1]});
  return NvrtcKernel::Create(
      ctx, node.name,
      vec ? codegen::LayerNormAddForwardVec(dtype) : codegen::LayerNormAddForward(dtype),
      RowGrid(r.rows), dim3(kRowBlock), 0, std::move(args));
}

// layer_norm_grad_add: layer_norm_grad's inputs and dres (x's spec) -> (dx + dres, dweight, dbias).
absl::StatusOr<std::vector<TensorSpec>> InferGradAdd(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 6));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, InferGrad(attrs, in.subspan(0, 5)));
  if (!(in[5] == in[1])) {
    return absl::InvalidArgumentError(absl::StrCat("the residual gradient ", in[5].ToString(),
                                                   " must match x ", in[1].ToString()));
  }
  return out;
}

// The reference: layer_norm_grad's, then add's.
absl::Status CpuGradAdd(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ir::HostTensor dx(out[0]->spec());
  std::vector<ir::HostTensor*> grad_out = {&dx, out[1], out[2]};
  RETURN_IF_ERROR(CpuGrad(node, in.subspan(0, 5), grad_out));
  std::vector<ir::HostTensor*> add_in = {&dx, in[5]};
  const Node stub;
  return AddOp().cpu(stub, add_in, out.subspan(0, 1));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGradAdd(const LoweringContext& ctx,
                                                        const Node& node) {
  return LowerGradOf(ctx, node, /*add=*/true);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerLayerNormGradWithSumInOnePass(
    const LoweringContext& ctx, const Node& node, bool add) {
  ASSIGN_OR_RETURN(const DType dtype, GradDataType(ctx, node, add));
  ASSIGN_OR_RETURN(const Rows r, RowsOf(ctx.input_specs[1]));
  const codegen::LayerNormBackwardLaunch l =
      codegen::LayerNormBackwardLaunchFor(r.rows, r.cols, dtype);
  if (l.lane_vectors == 0 || !OnePassApplies(ctx, add, l)) return nullptr;
  return LowerOnePassGrad(ctx, node, add, dtype, r, l, /*sum=*/true);
}

const ir::OpDef& AddLayerNormOp() {
  static const ir::OpDef op{.name = "add_layer_norm",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferAddForward,
                            .cpu = CpuAddForward,
                            .lower = LowerAddForward,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& LayerNormGradAddOp() {
  static const ir::OpDef op{.name = "layer_norm_grad_add",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGradAdd,
                            .cpu = CpuGradAdd,
                            .lower = LowerGradAdd,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& LayerNormOp() {
  static const ir::OpDef op{.name = "layer_norm",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferForward,
                            .grad = GradForward,
                            .cpu = CpuForward,
                            .lower = LowerForward,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& LayerNormGradOp() {
  static const ir::OpDef op{.name = "layer_norm_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerGrad,
                            .low_precision_lowering = true};
  return op;
}

std::vector<codegen::GeneratedKernel> SizedLayerNormKernelsOf(const Graph& graph,
                                                              const Node& node) {
  const bool with_sum = node.op == &LayerNormGradColumnSumOp();
  const bool add = node.op == &LayerNormGradAddOp() || (with_sum && node.inputs.size() == 6);
  if ((node.op != &LayerNormGradOp() && node.op != &LayerNormGradAddOp() && !with_sum) ||
      node.inputs.size() < 2)
    return {};
  const TensorSpec& x = graph.spec(node.inputs[1]);
  const absl::StatusOr<Rows> r = RowsOf(x);
  if (!r.ok()) return {};
  const codegen::LayerNormBackwardLaunch l =
      codegen::LayerNormBackwardLaunchFor(r->rows, r->cols, x.dtype);
  if (l.lane_vectors == 0) return {};
  if (with_sum) return {codegen::LayerNormBackwardWithSum(x.dtype, add, l.lane_vectors)};
  return {codegen::LayerNormBackwardWith(x.dtype, add, l.lane_vectors)};
}

}  // namespace reprise::ops
