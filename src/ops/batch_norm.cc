// batch_norm_train, batch_norm_grad and batch_norm_infer: shape rules, gradient rule, float64-
// accumulating CPU references, and GPU lowerings (cuDNN, and our own kernels for NHWC training).
#include "src/ops/batch_norm.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_tensor.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

struct BnParams {
  double epsilon = 1e-5;
  double momentum = 0.1;
  Layout layout = Layout::kNCHW;
};

absl::StatusOr<BnParams> BnParamsOf(const Attrs& attrs) {
  BnParams p;
  if (attrs.contains("epsilon")) {
    ASSIGN_OR_RETURN(p.epsilon, ir::FloatAttr(attrs, "epsilon"));
  }
  if (attrs.contains("momentum")) {
    ASSIGN_OR_RETURN(p.momentum, ir::FloatAttr(attrs, "momentum"));
  }
  ASSIGN_OR_RETURN(p.layout, LayoutAttr(attrs));
  if (!std::isfinite(p.epsilon) || p.epsilon < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon must be finite and non-negative, got ", p.epsilon));
  }
  if (!(p.momentum >= 0 && p.momentum <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum must be in [0, 1], got ", p.momentum));
  }
  return p;
}

// InvalidArgument unless `v` is a vector of x's channels with x's dtype.
absl::Status CheckPerChannel(const TensorSpec& v, const ImageDims& x, const TensorSpec& x_spec,
                             absl::string_view what) {
  // Mixed precision keeps the per-channel tensors float32 beside 16-bit data.
  const bool dtype_fits =
      v.dtype == x_spec.dtype || (IsLowPrecision(x_spec.dtype) && v.dtype == DType::kFloat32);
  if (v.shape.rank() != 1 || v.shape.dim(0) != x.c || !dtype_fits) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", TensorSpec{Shape{x.c}, x_spec.dtype}.ToString(),
                     " (one value per channel of x ", x_spec.ToString(), " in ",
                     LayoutName(x.layout), "), got ", v.ToString()));
  }
  return absl::OkStatus();
}

// Checks x (input `x_index`) and the per-channel inputs named in `names` (every other input that
// is not x or dy); returns x's extents.
absl::StatusOr<ImageDims> CheckInputs(const Attrs& attrs, absl::Span<const TensorSpec> in,
                                      int x_index, const std::vector<const char*>& names) {
  RETURN_IF_ERROR(CheckArity(in, 5));
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(attrs));
  ASSIGN_OR_RETURN(ImageDims x, ImageDimsOf(in[x_index], p.layout, "x"));
  for (int i = x_index + 1, k = 0; i < 5; ++i, ++k) {
    RETURN_IF_ERROR(CheckPerChannel(in[i], x, in[x_index], names[k]));
  }
  if (x.NumElements() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("x ", in[x_index].ToString(), " is empty"));
  }
  return x;
}

absl::StatusOr<std::vector<TensorSpec>> InferTrain(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(ImageDims x,
                   CheckInputs(attrs, in, 0, {"gamma", "beta", "running_mean", "running_var"}));
  if (x.n * x.h * x.w < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("training needs more than one value per channel (N·H·W > 1) for the "
                     "unbiased running variance, got x ",
                     in[0].ToString()));
  }
  const TensorSpec per_channel{Shape{x.c}, in[1].dtype};  // gamma's: float32 in mixed precision.
  return std::vector<TensorSpec>{in[0], per_channel, per_channel};
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(ImageDims x, CheckInputs(attrs, in, 1, {"gamma", "saved_mean", "saved_invstd"}));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " must match x ", in[1].ToString()));
  }
  const TensorSpec per_channel{Shape{x.c}, in[2].dtype};  // gamma's.
  return std::vector<TensorSpec>{in[1], per_channel, per_channel};
}

absl::StatusOr<std::vector<TensorSpec>> InferInfer(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(
      CheckInputs(attrs, in, 0, {"gamma", "beta", "running_mean", "running_var"}).status());
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradTrain(Graph& g, const Node& node,
                                             absl::Span<const Value> dout,
                                             const std::vector<bool>& needs) {
  if (dout[1].valid() || dout[2].valid()) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name,
                     "': a gradient flows into saved_mean or saved_invstd of batch_norm_train, "
                     "which have no gradient rule"));
  }
  std::vector<Value> grads(5);
  if (!dout[0].valid() || !(needs[0] || needs[1] || needs[2])) return grads;
  ASSIGN_OR_RETURN(
      std::vector<Value> d,
      g.AddOp(BatchNormGradOp(), absl::StrCat(node.name, ".grad"),
              {dout[0], node.inputs[0], node.inputs[1], Value{node.id, 1}, Value{node.id, 2}},
              node.attrs));
  for (int i = 0; i < 3; ++i) {
    if (needs[i]) grads[i] = d[i];
  }
  return grads;  // Running statistics (inputs 3 and 4) are state: no gradient.
}

// Calls fn(index) for every element of channel ch, in storage-independent (n, h, w) order.
template <typename Fn>
void ForEachInChannel(const ImageDims& d, int64_t ch, Fn&& fn) {
  for (int64_t b = 0; b < d.n; ++b) {
    for (int64_t r = 0; r < d.h; ++r) {
      for (int64_t q = 0; q < d.w; ++q) fn(d.Index(b, ch, r, q));
    }
  }
}

absl::Status CpuTrain(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(in[0]->spec(), p.layout, "x"));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), gamma = in[1]->data<T>(), beta = in[2]->data<T>();
    auto running_mean = in[3]->data<T>(), running_var = in[4]->data<T>();
    auto y = out[0]->data<T>(), saved_mean = out[1]->data<T>(), saved_invstd = out[2]->data<T>();
    const double m = static_cast<double>(d.n * d.h * d.w);
    for (int64_t ch = 0; ch < d.c; ++ch) {
      double sum = 0, squares = 0;
      ForEachInChannel(d, ch, [&](int64_t i) { sum += x[i]; });
      const double mean = sum / m;
      ForEachInChannel(d, ch, [&](int64_t i) { squares += (x[i] - mean) * (x[i] - mean); });
      const double var = squares / m;  // Biased: what the batch is normalised with.
      const double invstd = 1.0 / std::sqrt(var + p.epsilon);
      saved_mean[ch] = static_cast<T>(mean);
      saved_invstd[ch] = static_cast<T>(invstd);
      // y from the statistics as saved, so that batch_norm_apply (which recomputes y from them
      // in the backward pass) gives the same bits.
      ForEachInChannel(d, ch, [&](int64_t i) {
        y[i] = BatchNormOutput(x[i], saved_mean[ch], saved_invstd[ch], gamma[ch], beta[ch]);
      });
      // PyTorch's running update: the unbiased variance, as an estimate of the population's.
      running_mean[ch] = static_cast<T>((1 - p.momentum) * running_mean[ch] + p.momentum * mean);
      running_var[ch] =
          static_cast<T>((1 - p.momentum) * running_var[ch] + p.momentum * var * m / (m - 1));
    }
    return absl::OkStatus();
  });
}

absl::Status CpuGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(in[1]->spec(), p.layout, "x"));
  return DispatchFloat(in[1]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>(), x = in[1]->data<T>(), gamma = in[2]->data<T>();
    absl::Span<const T> saved_mean = in[3]->data<T>(), saved_invstd = in[4]->data<T>();
    auto dx = out[0]->data<T>(), dgamma = out[1]->data<T>(), dbeta = out[2]->data<T>();
    const double m = static_cast<double>(d.n * d.h * d.w);
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const double mean = saved_mean[ch], invstd = saved_invstd[ch];
      double sum_dy = 0, sum_dy_xhat = 0;
      ForEachInChannel(d, ch, [&](int64_t i) {
        sum_dy += dy[i];
        sum_dy_xhat += dy[i] * ((x[i] - mean) * invstd);
      });
      const double scale = gamma[ch] * invstd;
      ForEachInChannel(d, ch, [&](int64_t i) {
        const double xhat = (x[i] - mean) * invstd;
        dx[i] = static_cast<T>(scale * (dy[i] - (sum_dy + xhat * sum_dy_xhat) / m));
      });
      dgamma[ch] = static_cast<T>(sum_dy_xhat);
      dbeta[ch] = static_cast<T>(sum_dy);
    }
    return absl::OkStatus();
  });
}

absl::Status CpuInfer(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(in[0]->spec(), p.layout, "x"));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), gamma = in[1]->data<T>(), beta = in[2]->data<T>();
    absl::Span<const T> mean = in[3]->data<T>(), var = in[4]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const double scale = gamma[ch] / std::sqrt(static_cast<double>(var[ch]) + p.epsilon);
      ForEachInChannel(d, ch, [&](int64_t i) {
        y[i] = static_cast<T>((x[i] - static_cast<double>(mean[ch])) * scale + beta[ch]);
      });
    }
    return absl::OkStatus();
  });
}

// GPU inference: cuDNN 9 deprecates its legacy batch-norm calls in favour of the graph API, but
// they remain supported and are the simplest capturable path; the warnings are silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// One cuDNN inference call with descriptors built at lowering; Launch binds the shared handle to
// the stream and enqueues, nothing more.
class CudnnBatchNormInfer : public GpuKernel {
 public:
  CudnnBatchNormInfer(const LoweringContext& ctx, const Node& node, const BnParams& p,
                      const ImageDims& d, runtime::CudnnTensorDescriptor x_desc,
                      runtime::CudnnTensorDescriptor channel_desc)
      : where_(absl::StrCat("node '", node.name, "'")),
        cudnn_(ctx.cudnn),
        params_(p),
        x_desc_(std::move(x_desc)),
        channel_desc_(std::move(channel_desc)),
        in_(ctx.inputs),
        out_(ctx.outputs),
        describe_(absl::StrCat("cudnn ", node.op_name(), " spatial ", LayoutName(d.layout),
                               " n=", d.n, " c=", d.c, " h=", d.h, " w=", d.w)) {}

  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    const float one = 1.0f, zero = 0.0f;
    return runtime::CudaStatus(
        cudnnBatchNormalizationForwardInference(cudnn_->get(), CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                x_desc_.get(), in_[0], x_desc_.get(), out_[0],
                                                channel_desc_.get(), in_[1], in_[2], in_[3], in_[4],
                                                params_.epsilon),
        "cudnnBatchNormalizationForwardInference", where_);
  }
  std::string Describe() const override { return describe_; }

 private:
  std::string where_;
  const runtime::CudnnHandle* cudnn_;
  BnParams params_;
  runtime::CudnnTensorDescriptor x_desc_, channel_desc_;
  std::vector<void*> in_, out_;
  std::string describe_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerInfer(const LoweringContext& ctx,
                                                      const Node& node) {
  const std::string where = absl::StrCat("node '", node.name, "'");
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  RETURN_IF_ERROR(CheckGpuFloat32(node, ctx.input_specs));
  if (ctx.cudnn == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": ", node.op_name(), " needs a cuDNN handle, and the plan has none"));
  }
  if (p.epsilon < CUDNN_BN_MIN_EPSILON) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": epsilon ", p.epsilon, " is below cuDNN's minimum CUDNN_BN_MIN_EPSILON (",
        CUDNN_BN_MIN_EPSILON, ")"));
  }
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(ctx.input_specs[0], p.layout, "x"));
  ASSIGN_OR_RETURN(runtime::CudnnTensorDescriptor x_desc,
                   runtime::CudnnTensorDescriptor::Create4d(
                       d.layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                       CUDNN_DATA_FLOAT, {d.n, d.c, d.h, d.w}, where));
  // Scale, bias, means and variances: 1xCx1x1, what cudnnDeriveBNTensorDescriptor gives in
  // spatial mode for fp32 data.
  ASSIGN_OR_RETURN(runtime::CudnnTensorDescriptor channel_desc,
                   runtime::CudnnTensorDescriptor::Create4d(CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                            {1, d.c, 1, 1}, where));
  return std::unique_ptr<GpuKernel>(
      new CudnnBatchNormInfer(ctx, node, p, d, std::move(x_desc), std::move(channel_desc)));
}

#pragma GCC diagnostic pop

// NCHW data as our kernels view it: rows of pixels, planes of H·W of them (0: channels-last).
int64_t PlaneOf(const ImageDims& d) { return d.layout == Layout::kNCHW ? d.h * d.w : 0; }

// Training runs on our own kernels (batch_norm_nhwc.h) in both layouts, float32 or bfloat16:
// cuDNN's NHWC batch norm is ~100x below memory bandwidth, and its NCHW one sums in float32
// (batch_norm_nhwc.h says what that cost). Inference stays on cuDNN.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerTrain(const LoweringContext& ctx,
                                                      const Node& node) {
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  ASSIGN_OR_RETURN(const DType dtype, NhwcDataType(node, ctx.input_specs, {0}));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(ctx.input_specs[0], p.layout, "x"));
  auto in = [&](int i) { return static_cast<float*>(ctx.inputs[i]); };
  auto out = [&](int i) { return static_cast<float*>(ctx.outputs[i]); };
  return LowerNhwcBatchNormTrain(ctx, node.name,
                                 {.x = ctx.inputs[0],
                                  .gamma = in(1),
                                  .beta = in(2),
                                  .running_mean = in(3),
                                  .running_var = in(4),
                                  .y = ctx.outputs[0],
                                  .saved_mean = out(1),
                                  .saved_invstd = out(2),
                                  .rows = d.n * d.h * d.w,
                                  .channels = d.c,
                                  .plane = PlaneOf(d),
                                  .epsilon = p.epsilon,
                                  .momentum = p.momentum,
                                  .dtype = dtype});
}
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGrad(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(BnParams p, BnParamsOf(node.attrs));
  ASSIGN_OR_RETURN(const DType dtype, NhwcDataType(node, ctx.input_specs, {0, 1}));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(ctx.input_specs[1], p.layout, "x"));
  auto in = [&](int i) { return static_cast<const float*>(ctx.inputs[i]); };
  auto out = [&](int i) { return static_cast<float*>(ctx.outputs[i]); };
  return LowerNhwcBatchNormGrad(ctx, node.name,
                                {.dy = ctx.inputs[0],
                                 .x = ctx.inputs[1],
                                 .gamma = in(2),
                                 .saved_mean = in(3),
                                 .saved_invstd = in(4),
                                 .dx = ctx.outputs[0],
                                 .dgamma = out(1),
                                 .dbeta = out(2),
                                 .rows = d.n * d.h * d.w,
                                 .channels = d.c,
                                 .plane = PlaneOf(d),
                                 .dtype = dtype});
}

}  // namespace

const ir::OpDef& BatchNormTrainOp() {
  static const ir::OpDef op{.name = "batch_norm_train",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferTrain,
                            .grad = GradTrain,
                            .cpu = CpuTrain,
                            .lower = LowerTrain,
                            .mutated_inputs = {3, 4},
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& BatchNormGradOp() {
  static const ir::OpDef op{.name = "batch_norm_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerGrad,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& BatchNormInferOp() {
  static const ir::OpDef op{.name = "batch_norm_infer",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferInfer,
                            .cpu = CpuInfer,
                            .lower = LowerInfer};
  return op;
}

}  // namespace reprise::ops
