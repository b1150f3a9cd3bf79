#include "src/runtime/cudnn_conv.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_record.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"

// cuDNN 9 marks its legacy convolution API deprecated; it is still the shortest path to a fixed,
// capturable convolution call, so this file opts out of the warnings it may give.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace reprise::runtime {
namespace {

absl::StatusOr<cudnnDataType_t> DataTypeOf(DType dtype, absl::string_view context) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DType::kFloat64:
      return CUDNN_DATA_DOUBLE;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": cuDNN convolutions take float tensors, not ", DTypeName(dtype)));
  }
}

cudnnTensorFormat_t FormatOf(Layout layout) {
  return layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// cuDNN's legacy descriptors hold ints.
absl::StatusOr<int> ToInt(int64_t value, absl::string_view what, absl::string_view context) {
  if (value < 0 || value > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", what, " = ", value, " does not fit cuDNN's int dimensions"));
  }
  return static_cast<int>(value);
}

absl::string_view MathName(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_op_conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "unknown";
}

// CUDNN_DEFAULT_MATH lets fp32 convolutions use TF32 tensor cores; only CUDNN_FMA_MATH is strict
// fp32. Down-conversion to fp16 (ALLOW_CONVERSION) is never wanted for fp32 training. 16-bit
// data (bfloat16, float16) is meant for tensor cores.
bool MathAllowed(cudnnMathType_t math, bool tensor_cores) {
  if (math == CUDNN_FMA_MATH) return true;
  return tensor_cores && (math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH);
}

// Strict fp32: float32 data without TF32.
bool StrictFloat32(const ConvShape& shape, const ConvOptions& options) {
  return shape.dtype == DType::kFloat32 && !options.allow_tf32;
}

// FFT and Winograd algorithms compute in a transformed domain whose rounding error scales with the
// largest values of the whole tensor, not each output's own: strict fp32 is asked for precision, so
// it skips them. (They did not cause the 1e-3 bias-gradient differences ResNet-18 tests showed;
// those come from summation order, tests/gpu/update_agreement.h.) With TF32 or 16-bit data the
// error is of that order anyway.
bool TransformDomain(ConvKind kind, int algo) {
  switch (kind) {
    case ConvKind::kForward:
      return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case ConvKind::kBackwardData:
      return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case ConvKind::kBackwardFilter:
      return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return false;
}

struct Descriptors {
  const ConvTensorDescriptor& x;
  const ConvFilterDescriptor& w;
  const ConvTensorDescriptor& y;
  const ConvDescriptor& conv;
  bool strict_fp32;      // StrictFloat32: no tensor cores, no transform-domain algorithms.
  bool tensor_op_first;  // 16-bit: tensor-core candidates before any other (FirstQualifying).
};

// The workspace cuDNN asks of `algo` (its enum of `kind`) with the descriptor's math type.
absl::StatusOr<size_t> WorkspaceOf(cudnnHandle_t h, const Descriptors& d, ConvKind kind, int algo,
                                   absl::string_view context) {
  size_t bytes = 0;
  switch (kind) {
    case ConvKind::kForward:
      RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionForwardWorkspaceSize(
                                     h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes),
                                 "cudnnGetConvolutionForwardWorkspaceSize", context));
      return bytes;
    case ConvKind::kBackwardData:
      RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionBackwardDataWorkspaceSize(
                                     h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes),
                                 "cudnnGetConvolutionBackwardDataWorkspaceSize", context));
      return bytes;
    case ConvKind::kBackwardFilter:
      RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                     h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes),
                                 "cudnnGetConvolutionBackwardFilterWorkspaceSize", context));
      return bytes;
  }
  return absl::InternalError(absl::StrCat(context, ": unknown convolution kind"));
}

// The first of cuDNN's ranked candidates that qualifies, its exact workspace asked of cuDNN with
// its math type set on the descriptor. The three perf structs of the three kinds have the same
// fields.
//
// With 16-bit data the candidates that run on tensor cores (CUDNN_TENSOR_OP_MATH) are tried
// first, whatever their rank: the legacy API uses tensor cores only with that math type, and its
// CUDNN_DEFAULT_MATH bfloat16 kernels ran ResNet-50's convolutions 40x slower than TF32 on an H100
// (2026-11-23, docs/results/history/2026-11-23_d971053.md). The others stay as a last resort, for
// shapes without one.
template <typename Perf>
absl::StatusOr<ConvAlgorithm> FirstQualifying(const std::vector<Perf>& candidates, cudnnHandle_t h,
                                              const Descriptors& d, const ConvOptions& options,
                                              ConvKind kind, absl::string_view context) {
  const ConvDescriptor& conv = d.conv;
  const bool strict = d.strict_fp32, tensor_op_first = d.tensor_op_first;
  std::vector<std::string> seen;
  for (const Perf& perf : candidates) {
    seen.push_back(
        absl::StrCat("algo ", static_cast<int>(perf.algo), " (", cudnnGetErrorString(perf.status),
                     ", ", MathName(perf.mathType), ", ", perf.memory, " bytes",
                     perf.determinism == CUDNN_DETERMINISTIC ? ", deterministic" : "", ")"));
  }
  for (const bool tensor_op_pass : {true, false}) {
    if (tensor_op_pass && !tensor_op_first) continue;
    for (const Perf& perf : candidates) {
      if (tensor_op_pass && perf.mathType != CUDNN_TENSOR_OP_MATH) continue;
      if (perf.status != CUDNN_STATUS_SUCCESS) continue;
      if (!MathAllowed(perf.mathType, !strict)) continue;
      if (strict && TransformDomain(kind, static_cast<int>(perf.algo))) continue;
      if (options.deterministic && perf.determinism != CUDNN_DETERMINISTIC) continue;
      if (perf.memory > options.workspace_limit) continue;
      RETURN_IF_ERROR(conv.SetMathType(perf.mathType, context));
      ASSIGN_OR_RETURN(const size_t workspace,
                       WorkspaceOf(h, d, kind, static_cast<int>(perf.algo), context));
      if (workspace > options.workspace_limit) continue;
      return ConvAlgorithm{.algo = static_cast<int>(perf.algo),
                           .math = perf.mathType,
                           .workspace_bytes = workspace,
                           .candidates = options.measure ? std::ssize(candidates) : 0,
                           .measured_ms = options.measure ? perf.time : 0.0};
    }
  }
  return absl::NotFoundError(absl::StrCat(
      context, ": no cuDNN ", ConvKindName(kind), " algorithm qualifies (",
      strict ? "strict fp32, no FFT or Winograd" : "tensor cores allowed",
      options.deterministic ? ", deterministic" : "", ", workspace <= ", options.workspace_limit,
      " bytes) among ", candidates.size(), " candidates",
      seen.empty() ? "" : absl::StrCat(": ", absl::StrJoin(seen, "; "))));
}

}  // namespace

absl::string_view ConvKindName(ConvKind kind) {
  switch (kind) {
    case ConvKind::kForward:
      return "fwd";
    case ConvKind::kBackwardData:
      return "dgrad";
    case ConvKind::kBackwardFilter:
      return "wgrad";
  }
  return "unknown";
}

std::string ConvShape::ToString() const {
  const int64_t cg = groups > 0 ? c / groups : c;
  const bool nhwc = layout == Layout::kNHWC;
  const auto dims = [&](int64_t a, int64_t b, int64_t c2, int64_t d) {
    return nhwc ? absl::StrCat("[", a, ", ", c2, ", ", d, ", ", b, "]")
                : absl::StrCat("[", a, ", ", b, ", ", c2, ", ", d, "]");
  };
  return absl::StrCat(LayoutName(layout), " ", DTypeName(dtype), " x", dims(n, c, h, w), " w",
                      dims(k, cg, r, s), " y", dims(n, k, p, q), " stride ", stride_h, "x",
                      stride_w, " pad ", pad_h, "x", pad_w, " dilation ", dilation_h, "x",
                      dilation_w, " groups ", groups);
}

// ConvAlgorithmCache ----------------------------------------------------------------------------

ConvAlgorithmCache& ConvAlgorithmCache::Global() {
  static ConvAlgorithmCache* cache = new ConvAlgorithmCache();
  return *cache;
}

std::optional<ConvAlgorithm> ConvAlgorithmCache::Find(const ConvAlgorithmKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

ConvAlgorithm ConvAlgorithmCache::Insert(const ConvAlgorithmKey& key,
                                         const ConvAlgorithm& algorithm) {
  absl::MutexLock lock(&mu_);
  return entries_.try_emplace(key, algorithm).first->second;
}

void ConvAlgorithmCache::Clear() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
}

size_t ConvAlgorithmCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

// Descriptors -----------------------------------------------------------------------------------

absl::StatusOr<ConvTensorDescriptor> ConvTensorDescriptor::Create(Layout layout, DType dtype,
                                                                  int64_t n, int64_t c, int64_t h,
                                                                  int64_t w,
                                                                  absl::string_view context) {
  ASSIGN_OR_RETURN(const cudnnDataType_t type, DataTypeOf(dtype, context));
  ASSIGN_OR_RETURN(const int in, ToInt(n, "n", context));
  ASSIGN_OR_RETURN(const int ic, ToInt(c, "c", context));
  ASSIGN_OR_RETURN(const int ih, ToInt(h, "h", context));
  ASSIGN_OR_RETURN(const int iw, ToInt(w, "w", context));
  ConvTensorDescriptor out;
  cudnnTensorDescriptor_t desc = nullptr;
  CUDA_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&desc), context);
  out.desc_.reset(desc);
  RETURN_IF_ERROR(
      CudaStatus(cudnnSetTensor4dDescriptor(desc, FormatOf(layout), type, in, ic, ih, iw),
                 "cudnnSetTensor4dDescriptor", context));
  return out;
}

void ConvTensorDescriptor::Deleter::operator()(cudnnTensorStruct* desc) const {
  (void)cudnnDestroyTensorDescriptor(desc);
}

absl::StatusOr<ConvFilterDescriptor> ConvFilterDescriptor::Create(Layout layout, DType dtype,
                                                                  int64_t k, int64_t c, int64_t r,
                                                                  int64_t s,
                                                                  absl::string_view context) {
  ASSIGN_OR_RETURN(const cudnnDataType_t type, DataTypeOf(dtype, context));
  ASSIGN_OR_RETURN(const int ik, ToInt(k, "k", context));
  ASSIGN_OR_RETURN(const int ic, ToInt(c, "c / groups", context));
  ASSIGN_OR_RETURN(const int ir, ToInt(r, "r", context));
  ASSIGN_OR_RETURN(const int is, ToInt(s, "s", context));
  ConvFilterDescriptor out;
  cudnnFilterDescriptor_t desc = nullptr;
  CUDA_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&desc), context);
  out.desc_.reset(desc);
  RETURN_IF_ERROR(
      CudaStatus(cudnnSetFilter4dDescriptor(desc, type, FormatOf(layout), ik, ic, ir, is),
                 "cudnnSetFilter4dDescriptor", context));
  return out;
}

void ConvFilterDescriptor::Deleter::operator()(cudnnFilterStruct* desc) const {
  (void)cudnnDestroyFilterDescriptor(desc);
}

absl::StatusOr<ConvDescriptor> ConvDescriptor::Create(const ConvShape& shape, cudnnMathType_t math,
                                                      absl::string_view context) {
  ASSIGN_OR_RETURN(const cudnnDataType_t type, DataTypeOf(shape.dtype, context));
  ASSIGN_OR_RETURN(const int pad_h, ToInt(shape.pad_h, "pad_h", context));
  ASSIGN_OR_RETURN(const int pad_w, ToInt(shape.pad_w, "pad_w", context));
  ASSIGN_OR_RETURN(const int stride_h, ToInt(shape.stride_h, "stride_h", context));
  ASSIGN_OR_RETURN(const int stride_w, ToInt(shape.stride_w, "stride_w", context));
  ASSIGN_OR_RETURN(const int dilation_h, ToInt(shape.dilation_h, "dilation_h", context));
  ASSIGN_OR_RETURN(const int dilation_w, ToInt(shape.dilation_w, "dilation_w", context));
  ASSIGN_OR_RETURN(const int groups, ToInt(shape.groups, "groups", context));
  const cudnnDataType_t accumulate =
      type == CUDNN_DATA_BFLOAT16 || type == CUDNN_DATA_HALF ? CUDNN_DATA_FLOAT : type;
  ConvDescriptor out;
  cudnnConvolutionDescriptor_t desc = nullptr;
  CUDA_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&desc), context);
  out.desc_.reset(desc);
  // fp32 and fp64 accumulate in their own type, bfloat16 and float16 in fp32 (as PyTorch's).
  RETURN_IF_ERROR(
      CudaStatus(cudnnSetConvolution2dDescriptor(desc, pad_h, pad_w, stride_h, stride_w, dilation_h,
                                                 dilation_w, CUDNN_CROSS_CORRELATION, accumulate),
                 "cudnnSetConvolution2dDescriptor", context));
  RETURN_IF_ERROR(CudaStatus(cudnnSetConvolutionGroupCount(desc, groups),
                             "cudnnSetConvolutionGroupCount", context));
  RETURN_IF_ERROR(out.SetMathType(math, context));
  return out;
}

absl::Status ConvDescriptor::SetMathType(cudnnMathType_t math, absl::string_view context) const {
  return CudaStatus(cudnnSetConvolutionMathType(desc_.get(), math), "cudnnSetConvolutionMathType",
                    context);
}

void ConvDescriptor::Deleter::operator()(cudnnConvolutionStruct* desc) const {
  (void)cudnnDestroyConvolutionDescriptor(desc);
}

// CudnnConv -------------------------------------------------------------------------------------

namespace {

absl::StatusOr<ConvAlgorithm> SearchForward(cudnnHandle_t h, const Descriptors& d,
                                            const ConvOptions& options,
                                            const CudnnConv::Buffers& buffers,
                                            absl::string_view context) {
  int max_count = 0;
  RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                             "cudnnGetConvolutionForwardAlgorithmMaxCount", context));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(std::max(max_count, 1));
  int returned = 0;
  if (options.measure) {
    RETURN_IF_ERROR(CudaStatus(
        cudnnFindConvolutionForwardAlgorithmEx(
            h, d.x.get(), buffers.a, d.w.get(), buffers.b, d.conv.get(), d.y.get(), buffers.out,
            max_count, &returned, perfs.data(), buffers.workspace, options.workspace_limit),
        "cudnnFindConvolutionForwardAlgorithmEx", context));
  } else {
    RETURN_IF_ERROR(CudaStatus(
        cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                               max_count, &returned, perfs.data()),
        "cudnnGetConvolutionForwardAlgorithm_v7", context));
  }
  perfs.resize(returned);
  return FirstQualifying(perfs, h, d, options, ConvKind::kForward, context);
}

absl::StatusOr<ConvAlgorithm> SearchBackwardData(cudnnHandle_t h, const Descriptors& d,
                                                 const ConvOptions& options,
                                                 const CudnnConv::Buffers& buffers,
                                                 absl::string_view context) {
  int max_count = 0;
  RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count),
                             "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", context));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(std::max(max_count, 1));
  int returned = 0;
  if (options.measure) {
    RETURN_IF_ERROR(CudaStatus(
        cudnnFindConvolutionBackwardDataAlgorithmEx(
            h, d.w.get(), buffers.b, d.y.get(), buffers.a, d.conv.get(), d.x.get(), buffers.out,
            max_count, &returned, perfs.data(), buffers.workspace, options.workspace_limit),
        "cudnnFindConvolutionBackwardDataAlgorithmEx", context));
  } else {
    RETURN_IF_ERROR(CudaStatus(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(),
                                                    d.x.get(), max_count, &returned, perfs.data()),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", context));
  }
  perfs.resize(returned);
  return FirstQualifying(perfs, h, d, options, ConvKind::kBackwardData, context);
}

absl::StatusOr<ConvAlgorithm> SearchBackwardFilter(cudnnHandle_t h, const Descriptors& d,
                                                   const ConvOptions& options,
                                                   const CudnnConv::Buffers& buffers,
                                                   absl::string_view context) {
  int max_count = 0;
  RETURN_IF_ERROR(CudaStatus(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count),
                             "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", context));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(std::max(max_count, 1));
  int returned = 0;
  if (options.measure) {
    RETURN_IF_ERROR(CudaStatus(
        cudnnFindConvolutionBackwardFilterAlgorithmEx(
            h, d.x.get(), buffers.a, d.y.get(), buffers.b, d.conv.get(), d.w.get(), buffers.out,
            max_count, &returned, perfs.data(), buffers.workspace, options.workspace_limit),
        "cudnnFindConvolutionBackwardFilterAlgorithmEx", context));
  } else {
    RETURN_IF_ERROR(CudaStatus(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), max_count, &returned, perfs.data()),
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", context));
  }
  perfs.resize(returned);
  return FirstQualifying(perfs, h, d, options, ConvKind::kBackwardFilter, context);
}

// The algorithm a measured record names where it still applies: a name that parses, a math type
// these options allow (strict float32: no tensor cores, no transform-domain algorithm), and a
// workspace cuDNN gives for these descriptors within the limit. Otherwise why not, for the caller
// to say before it measures again.
absl::StatusOr<ConvAlgorithm> AlgorithmFromRecord(cudnnHandle_t h, const Descriptors& d,
                                                  ConvKind kind, const ConvOptions& options,
                                                  absl::string_view text,
                                                  absl::string_view context) {
  ASSIGN_OR_RETURN(const PlanRecord record, DecodeConvPlanRecord(text));
  ASSIGN_OR_RETURN(ConvAlgorithm algorithm, ParseConvAlgorithmRecordName(kind, record.name));
  if (!MathAllowed(algorithm.math, !d.strict_fp32) ||
      (d.strict_fp32 && TransformDomain(kind, algorithm.algo))) {
    return absl::FailedPreconditionError(
        absl::StrCat("names ", record.name, ", which these options do not allow"));
  }
  RETURN_IF_ERROR(d.conv.SetMathType(algorithm.math, context));
  ASSIGN_OR_RETURN(algorithm.workspace_bytes, WorkspaceOf(h, d, kind, algorithm.algo, context));
  if (algorithm.workspace_bytes > options.workspace_limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("names ", record.name, ", which needs ", algorithm.workspace_bytes,
                     " bytes of workspace; the limit is ", options.workspace_limit));
  }
  algorithm.candidates = record.candidates;
  algorithm.measured_ms = record.median_ms;
  return algorithm;
}

}  // namespace

absl::StatusOr<CudnnConv> CudnnConv::Create(const CudnnHandle& handle, ConvKind kind,
                                            const ConvShape& shape, const ConvOptions& options,
                                            const Buffers& buffers, absl::string_view context) {
  if (shape.dtype != DType::kFloat32 && !IsLowPrecision(shape.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat(context, ": cuDNN convolutions run in float32, bfloat16 or float16, got ",
                     DTypeName(shape.dtype), " (", shape.ToString(), ")"));
  }
  if (shape.groups < 1 || shape.c % shape.groups != 0 || shape.k % shape.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": groups must divide both channel counts: ", shape.ToString()));
  }
  if (options.measure && (buffers.a == nullptr || buffers.b == nullptr || buffers.out == nullptr ||
                          (options.workspace_limit > 0 && buffers.workspace == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": measuring convolution algorithms needs the device buffers"));
  }
  ASSIGN_OR_RETURN(ConvTensorDescriptor x,
                   ConvTensorDescriptor::Create(shape.layout, shape.dtype, shape.n, shape.c,
                                                shape.h, shape.w, context));
  ASSIGN_OR_RETURN(ConvFilterDescriptor w,
                   ConvFilterDescriptor::Create(shape.layout, shape.dtype, shape.k,
                                                shape.c / shape.groups, shape.r, shape.s, context));
  ASSIGN_OR_RETURN(ConvTensorDescriptor y,
                   ConvTensorDescriptor::Create(shape.layout, shape.dtype, shape.n, shape.k,
                                                shape.p, shape.q, context));
  // The heuristics rank candidates for the descriptor's math type: strict fp32 asks for FMA,
  // 16-bit data for tensor cores, TF32 for the default (which allows TF32 tensor cores).
  const bool low_precision = IsLowPrecision(shape.dtype);
  const cudnnMathType_t math = StrictFloat32(shape, options) ? CUDNN_FMA_MATH
                               : low_precision               ? CUDNN_TENSOR_OP_MATH
                                                             : CUDNN_DEFAULT_MATH;
  ASSIGN_OR_RETURN(ConvDescriptor conv, ConvDescriptor::Create(shape, math, context));

  // cuDNN's own output size must be ours, or the descriptors disagree with the buffers.
  int dims[4] = {};
  RETURN_IF_ERROR(
      CudaStatus(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &dims[0],
                                                       &dims[1], &dims[2], &dims[3]),
                 "cudnnGetConvolution2dForwardOutputDim", context));
  if (dims[0] != shape.n || dims[1] != shape.k || dims[2] != shape.p || dims[3] != shape.q) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": cuDNN computes output [", dims[0],
                                                   ", ", dims[1], ", ", dims[2], ", ", dims[3],
                                                   "] (N, K, P, Q) for ", shape.ToString()));
  }

  CudnnConv planned(kind, shape, std::move(x), std::move(w), std::move(y), std::move(conv));
  const ConvAlgorithmKey key{.kind = kind,
                             .shape = shape,
                             .allow_tf32 = options.allow_tf32,
                             .deterministic = options.deterministic,
                             .measured = options.measure,
                             .workspace_limit = options.workspace_limit,
                             .device = options.device};
  std::optional<ConvAlgorithm> algorithm = ConvAlgorithmCache::Global().Find(key);
  const Descriptors d{
      planned.x_,   planned.w_, planned.y_, planned.conv_, StrictFloat32(shape, options),
      low_precision};
  const bool recorded = options.measure && options.records != nullptr;
  // Hashed only where the process has no choice yet (a record is looked up or written).
  const std::string record_key =
      recorded && !algorithm.has_value() ? ConvAlgorithmRecordKey(key) : "";
  if (!algorithm.has_value() && recorded) {
    if (std::optional<std::string> text =
            options.records->FindRecord(record_key, kConvAlgorithmRecordKind)) {
      absl::StatusOr<ConvAlgorithm> from_record =
          AlgorithmFromRecord(handle.get(), d, kind, options, *text, context);
      if (from_record.ok()) {
        algorithm = ConvAlgorithmCache::Global().Insert(key, *from_record);
        CountLegacyConvChoice({.from_records = 1});
      } else {
        CountLegacyConvChoice({.records_discarded = 1});
        absl::FPrintF(stderr, "reprise: measuring %s again: its algorithm record %s\n", context,
                      from_record.status().ToString());
      }
    }
  }
  if (!algorithm.has_value()) {
    const absl::Time start = absl::Now();
    if (options.measure) {
      // Timing runs on the handle's stream: a stream of our own choosing that is alive now,
      // synchronised before the lanes use the buffers it wrote.
      RETURN_IF_ERROR(handle.Bind(cudaStreamPerThread, context));
    }
    absl::StatusOr<ConvAlgorithm> found =
        kind == ConvKind::kForward ? SearchForward(handle.get(), d, options, buffers, context)
        : kind == ConvKind::kBackwardData
            ? SearchBackwardData(handle.get(), d, options, buffers, context)
            : SearchBackwardFilter(handle.get(), d, options, buffers, context);
    if (options.measure) {
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamPerThread), context);
    }
    RETURN_IF_ERROR(found.status());
    algorithm = ConvAlgorithmCache::Global().Insert(key, *found);
    if (options.measure) {
      CountLegacyConvChoice(
          {.measured = 1, .measure_ms = absl::ToDoubleMilliseconds(absl::Now() - start)});
    }
    if (recorded) {
      const PlanRecord record{.name = ConvAlgorithmRecordName(*algorithm),
                              .candidates = std::max<int64_t>(algorithm->candidates, 1),
                              .median_ms = std::max(algorithm->measured_ms, 1e-6)};
      options.records->StoreRecord(record_key, kConvAlgorithmRecordKind,
                                   EncodeConvPlanRecord(record));
    }
  }
  planned.algorithm_ = *algorithm;
  RETURN_IF_ERROR(planned.conv_.SetMathType(algorithm->math, context));
  return planned;
}

absl::Status CudnnConv::Run(const CudnnHandle& handle, const void* a, const void* b, void* out,
                            void* workspace, absl::string_view context, bool accumulate) const {
  if (algorithm_.workspace_bytes > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", Describe(), " needs ",
                                                   algorithm_.workspace_bytes,
                                                   " bytes of workspace, got none"));
  }
  // y = 1·conv + 0·y overwrites the output without reading it; beta = 1 adds to it.
  const float one = 1.0f, zero = 0.0f;
  const float* beta = accumulate ? &one : &zero;
  switch (kind_) {
    case ConvKind::kForward:
      return CudaStatus(
          cudnnConvolutionForward(handle.get(), &one, x_.get(), a, w_.get(), b, conv_.get(),
                                  static_cast<cudnnConvolutionFwdAlgo_t>(algorithm_.algo),
                                  workspace, algorithm_.workspace_bytes, beta, y_.get(), out),
          "cudnnConvolutionForward", context);
    case ConvKind::kBackwardData:
      return CudaStatus(
          cudnnConvolutionBackwardData(handle.get(), &one, w_.get(), b, y_.get(), a, conv_.get(),
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm_.algo),
                                       workspace, algorithm_.workspace_bytes, beta, x_.get(), out),
          "cudnnConvolutionBackwardData", context);
    case ConvKind::kBackwardFilter:
      return CudaStatus(cudnnConvolutionBackwardFilter(
                            handle.get(), &one, x_.get(), a, y_.get(), b, conv_.get(),
                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm_.algo),
                            workspace, algorithm_.workspace_bytes, beta, w_.get(), out),
                        "cudnnConvolutionBackwardFilter", context);
  }
  return absl::InternalError(absl::StrCat(context, ": unknown convolution kind"));
}

std::string CudnnConv::Describe() const {
  return absl::StrCat("cudnn conv ", ConvKindName(kind_), " algo ", algorithm_.algo, " ws ",
                      algorithm_.workspace_bytes, " math ", MathName(algorithm_.math));
}

}  // namespace reprise::runtime

#pragma GCC diagnostic pop
