#include "src/runtime/cudnn_graph_conv.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

absl::StatusOr<BackendDescriptor> BackendDescriptor::Create(cudnnBackendDescriptorType_t type,
                                                            absl::string_view context) {
  cudnnBackendDescriptor_t raw = nullptr;
  CUDA_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(type, &raw), context);
  BackendDescriptor out;
  out.desc_.reset(raw);
  return out;
}

void BackendDescriptor::Deleter::operator()(void* desc) const {
  (void)cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(desc));
}

namespace {

// Unique ids of the three operands in the operation graph and the variant pack.
constexpr int64_t kImageId = 1, kOutputId = 2, kFilterId = 3;
// Candidates timed with ConvOptions::measure.
constexpr int kMeasuredCandidates = 4;

template <typename T>
absl::Status Set(const BackendDescriptor& desc, cudnnBackendAttributeName_t name,
                 cudnnBackendAttributeType_t type, const T* values, int64_t count,
                 absl::string_view what, absl::string_view context) {
  return CudaStatus(cudnnBackendSetAttribute(desc.get(), name, type, count, values),
                    absl::StrCat("cudnnBackendSetAttribute(", what, ")"), context);
}

absl::Status SetDescriptor(const BackendDescriptor& desc, cudnnBackendAttributeName_t name,
                           const BackendDescriptor& value, absl::string_view what,
                           absl::string_view context) {
  const cudnnBackendDescriptor_t raw = value.get();
  return Set(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw, 1, what, context);
}

absl::Status Finalize(const BackendDescriptor& desc, absl::string_view what,
                      absl::string_view context) {
  return CudaStatus(cudnnBackendFinalize(desc.get()),
                    absl::StrCat("cudnnBackendFinalize(", what, ")"), context);
}

absl::StatusOr<cudnnDataType_t> GraphDataType(DType dtype, absl::string_view context) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    default:
      return absl::UnimplementedError(absl::StrCat(
          context, ": cuDNN graph convolutions take float32, bfloat16 or float16, not ",
          DTypeName(dtype)));
  }
}

// A dense 4-D operand of logical dims [a, b, c, d] = (N, C, H, W) or (K, C, R, S), stored in
// `layout` order: NHWC keeps the channels innermost.
absl::StatusOr<BackendDescriptor> Tensor(int64_t id, cudnnDataType_t type, Layout layout,
                                         std::array<int64_t, 4> dims, absl::string_view context) {
  const auto [n, c, h, w] = dims;
  const std::array<int64_t, 4> strides = layout == Layout::kNHWC
                                             ? std::array<int64_t, 4>{c * h * w, 1, w * c, c}
                                             : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  // Every buffer the memory plan places starts on 256 bytes (kBufferAlignment).
  const int64_t alignment = 16;
  ASSIGN_OR_RETURN(BackendDescriptor t,
                   BackendDescriptor::Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, context));
  RETURN_IF_ERROR(
      Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type, 1, "tensor type", context));
  RETURN_IF_ERROR(Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4,
                      "tensor dims", context));
  RETURN_IF_ERROR(Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4,
                      "tensor strides", context));
  RETURN_IF_ERROR(
      Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &id, 1, "tensor id", context));
  RETURN_IF_ERROR(Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment, 1,
                      "tensor alignment", context));
  RETURN_IF_ERROR(Finalize(t, "tensor", context));
  return t;
}

absl::StatusOr<BackendDescriptor> ConvolutionDescriptor(const ConvShape& shape,
                                                        absl::string_view context) {
  // Every data type accumulates in float32 (TF32 tensor cores read float32 operands).
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const std::array<int64_t, 2> dilation{shape.dilation_h, shape.dilation_w},
      stride{shape.stride_h, shape.stride_w}, pad{shape.pad_h, shape.pad_w};
  ASSIGN_OR_RETURN(BackendDescriptor conv,
                   BackendDescriptor::Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute, 1,
                      "conv compute type", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode,
                      1, "conv mode", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial, 1,
                      "conv spatial dims", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilation.data(), 2,
                      "conv dilations", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride.data(),
                      2, "conv strides", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2,
                      "conv pre-paddings", context));
  RETURN_IF_ERROR(Set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2,
                      "conv post-paddings", context));
  RETURN_IF_ERROR(Finalize(conv, "convolution", context));
  return conv;
}

// The attribute names of one kind's operation: its descriptor type, alpha, beta, convolution
// and its three operands (image-side, filter, output-side).
struct OperationAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t alpha, beta, conv, image, filter, output;
};

OperationAttrs AttrsOf(ConvKind kind) {
  switch (kind) {
    case ConvKind::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    case ConvKind::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
    case ConvKind::kBackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
}

// The device addresses of the image (x or dx), filter (w or dw) and output-side (y or dy)
// operands, from Run's (a, b, out).
std::array<void*, 3> OperandsOf(ConvKind kind, const void* a, const void* b, void* out) {
  void* ma = const_cast<void*>(a);
  void* mb = const_cast<void*>(b);
  switch (kind) {
    case ConvKind::kForward:
      return {ma, mb, out};
    case ConvKind::kBackwardData:
      return {out, mb, ma};
    case ConvKind::kBackwardFilter:
      break;
  }
  return {ma, out, mb};
}

absl::StatusOr<BackendDescriptor> VariantPack(ConvKind kind, const void* a, const void* b,
                                              void* out, void* workspace,
                                              absl::string_view context) {
  const std::array<int64_t, 3> ids{kImageId, kFilterId, kOutputId};
  std::array<void*, 3> pointers = OperandsOf(kind, a, b, out);
  ASSIGN_OR_RETURN(BackendDescriptor pack,
                   BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, context));
  RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, ids.data(), 3,
                      "variant pack ids", context));
  RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                      pointers.data(), 3, "variant pack pointers", context));
  RETURN_IF_ERROR(Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace, 1,
                      "variant pack workspace", context));
  RETURN_IF_ERROR(Finalize(pack, "variant pack", context));
  return pack;
}

// What one engine configuration's engine says of itself.
struct EngineFacts {
  int64_t index = -1;
  bool nondeterministic = false;
  bool runtime_compiled = false;
  bool down_converts = false;  // Inputs converted to a narrower type (e.g. fp32 to fp16).
};

absl::StatusOr<EngineFacts> FactsOf(const BackendDescriptor& config, absl::string_view context) {
  ASSIGN_OR_RETURN(BackendDescriptor engine,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, context));
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  CUDA_RETURN_IF_ERROR(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &raw),
                       context);
  EngineFacts facts;
  CUDA_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                CUDNN_TYPE_INT64, 1, &count, &facts.index),
                       context);
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> numerical{};
  CUDA_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, numerical.size(), &count,
                               numerical.data()),
      context);
  for (int64_t i = 0; i < count; ++i) {
    facts.nondeterministic |= numerical[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    facts.down_converts |= numerical[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
  }
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behavior{};
  CUDA_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                               CUDNN_TYPE_BEHAVIOR_NOTE, behavior.size(), &count, behavior.data()),
      context);
  for (int64_t i = 0; i < count; ++i) {
    facts.runtime_compiled |= behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  return facts;
}

// Median of a few timed runs on the handle's stream, in ms.
absl::StatusOr<float> TimePlan(const CudnnHandle& handle, const BackendDescriptor& plan,
                               const BackendDescriptor& pack, cudaStream_t stream,
                               absl::string_view context) {
  constexpr int kRuns = 5;
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start), context);
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop), context);
  std::vector<float> times;
  absl::Status status = CudaStatus(cudnnBackendExecute(handle.get(), plan.get(), pack.get()),
                                   "cudnnBackendExecute", context);
  for (int i = 0; i < kRuns && status.ok(); ++i) {
    status = CudaStatus(cudaEventRecord(start, stream), "cudaEventRecord", context);
    if (status.ok()) {
      status = CudaStatus(cudnnBackendExecute(handle.get(), plan.get(), pack.get()),
                          "cudnnBackendExecute", context);
    }
    if (status.ok()) status = CudaStatus(cudaEventRecord(stop, stream), "cudaEventRecord", context);
    if (status.ok()) {
      status = CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize", context);
    }
    float ms = 0;
    if (status.ok()) {
      status = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", context);
    }
    times.push_back(ms);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  RETURN_IF_ERROR(status);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

absl::StatusOr<std::shared_ptr<const GraphConvPlan>> GraphConvPlan::Create(
    const CudnnHandle& handle, ConvKind kind, const ConvShape& shape, const ConvOptions& options,
    const CudnnConv::Buffers& buffers, int rank, absl::string_view context) {
  if (shape.groups != 1) {
    return absl::UnimplementedError(absl::StrCat(
        context, ": reprise plans cuDNN graph convolutions of one group, got ", shape.ToString()));
  }
  ASSIGN_OR_RETURN(const cudnnDataType_t type, GraphDataType(shape.dtype, context));
  std::shared_ptr<GraphConvPlan> out(new GraphConvPlan());
  out->kind_ = kind;
  ASSIGN_OR_RETURN(BackendDescriptor image, Tensor(kImageId, type, shape.layout,
                                                   {shape.n, shape.c, shape.h, shape.w}, context));
  ASSIGN_OR_RETURN(BackendDescriptor filter,
                   Tensor(kFilterId, type, shape.layout, {shape.k, shape.c, shape.r, shape.s},
                          context));
  ASSIGN_OR_RETURN(BackendDescriptor output, Tensor(kOutputId, type, shape.layout,
                                                    {shape.n, shape.k, shape.p, shape.q}, context));
  ASSIGN_OR_RETURN(BackendDescriptor conv, ConvolutionDescriptor(shape, context));
  const OperationAttrs attrs = AttrsOf(kind);
  ASSIGN_OR_RETURN(BackendDescriptor op, BackendDescriptor::Create(attrs.type, context));
  const float alpha = 1.0f, beta = options.accumulate ? 1.0f : 0.0f;
  RETURN_IF_ERROR(Set(op, attrs.alpha, CUDNN_TYPE_FLOAT, &alpha, 1, "alpha", context));
  RETURN_IF_ERROR(Set(op, attrs.beta, CUDNN_TYPE_FLOAT, &beta, 1, "beta", context));
  RETURN_IF_ERROR(SetDescriptor(op, attrs.conv, conv, "convolution", context));
  RETURN_IF_ERROR(SetDescriptor(op, attrs.image, image, "image operand", context));
  RETURN_IF_ERROR(SetDescriptor(op, attrs.filter, filter, "filter operand", context));
  RETURN_IF_ERROR(SetDescriptor(op, attrs.output, output, "output operand", context));
  RETURN_IF_ERROR(Finalize(op, "convolution operation", context));
  ASSIGN_OR_RETURN(BackendDescriptor graph,
                   BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, context));
  const cudnnBackendDescriptor_t raw_op = op.get();
  RETURN_IF_ERROR(Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_op,
                      1, "operation graph ops", context));
  const cudnnHandle_t raw_handle = handle.get();
  RETURN_IF_ERROR(Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &raw_handle, 1,
                      "operation graph handle", context));
  RETURN_IF_ERROR(Finalize(graph, "operation graph", context));

  ASSIGN_OR_RETURN(BackendDescriptor heuristics,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, context));
  RETURN_IF_ERROR(SetDescriptor(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph,
                                "heuristics graph", context));
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  RETURN_IF_ERROR(Set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, 1,
                      "heuristics mode", context));
  RETURN_IF_ERROR(Finalize(heuristics, "heuristics", context));
  int64_t available = 0;
  CUDA_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr),
      context);
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw_configs;
  for (int64_t i = 0; i < available; ++i) {
    ASSIGN_OR_RETURN(BackendDescriptor config,
                     BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, context));
    raw_configs.push_back(config.get());
    configs.push_back(std::move(config));
  }
  int64_t returned = 0;
  CUDA_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                               raw_configs.data()),
      context);

  // The qualifying candidates in cuDNN's order, each with its finalized plan.
  struct Candidate {
    BackendDescriptor plan;
    int64_t engine;
    size_t workspace;
  };
  std::vector<Candidate> qualifying;
  std::vector<std::string> seen;
  const size_t wanted = options.measure ? kMeasuredCandidates
                        : rank >= 0     ? static_cast<size_t>(rank) + 1
                                        : 1;
  for (int64_t i = 0; i < returned && qualifying.size() < wanted; ++i) {
    ASSIGN_OR_RETURN(const EngineFacts facts, FactsOf(configs[i], context));
    const std::string name = absl::StrCat("engine ", facts.index);
    if (facts.runtime_compiled) {
      seen.push_back(absl::StrCat(name, " (compiled at run time)"));
      continue;
    }
    if (options.deterministic && facts.nondeterministic) {
      seen.push_back(absl::StrCat(name, " (nondeterministic)"));
      continue;
    }
    if (facts.down_converts) {
      seen.push_back(absl::StrCat(name, " (down-converts its inputs)"));
      continue;
    }
    ASSIGN_OR_RETURN(BackendDescriptor plan,
                     BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, context));
    RETURN_IF_ERROR(Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &raw_handle, 1,
                        "plan handle", context));
    RETURN_IF_ERROR(SetDescriptor(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i],
                                  "plan engine config", context));
    const cudnnStatus_t finalized = cudnnBackendFinalize(plan.get());
    if (finalized != CUDNN_STATUS_SUCCESS) {
      seen.push_back(absl::StrCat(name, " (", cudnnGetErrorString(finalized), ")"));
      continue;
    }
    int64_t workspace = 0, count = 0;
    CUDA_RETURN_IF_ERROR(
        cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &count, &workspace),
        context);
    if (static_cast<size_t>(workspace) > options.workspace_limit) {
      seen.push_back(absl::StrCat(name, " (", workspace, " bytes of workspace)"));
      continue;
    }
    qualifying.push_back({std::move(plan), facts.index, static_cast<size_t>(workspace)});
  }
  if (qualifying.empty() || (rank >= 0 && qualifying.size() <= static_cast<size_t>(rank))) {
    return absl::NotFoundError(absl::StrCat(
        context, ": no cuDNN graph-API ", ConvKindName(kind), " engine qualifies for ",
        shape.ToString(), " (workspace <= ", options.workspace_limit, " bytes",
        options.deterministic ? ", deterministic" : "", rank >= 0 ? ", rank " : "",
        rank >= 0 ? absl::StrCat(rank) : "", ") among ", returned, " candidates",
        seen.empty() ? "" : absl::StrCat(": ", absl::StrJoin(seen, "; "))));
  }
  size_t chosen = rank >= 0 ? static_cast<size_t>(rank) : 0;
  if (options.measure && rank < 0 && qualifying.size() > 1) {
    // Timed on a stream of our choosing, synchronised before the lanes use what it wrote.
    RETURN_IF_ERROR(handle.Bind(cudaStreamPerThread, context));
    float best = std::numeric_limits<float>::max();
    for (size_t i = 0; i < qualifying.size(); ++i) {
      ASSIGN_OR_RETURN(BackendDescriptor pack, VariantPack(kind, buffers.a, buffers.b, buffers.out,
                                                           buffers.workspace, context));
      ASSIGN_OR_RETURN(const float ms, TimePlan(handle, qualifying[i].plan, pack,
                                                cudaStreamPerThread, context));
      if (ms < best) best = ms, chosen = i;
    }
  }
  out->plan_ = std::move(qualifying[chosen].plan);
  out->engine_ = qualifying[chosen].engine;
  out->workspace_bytes_ = qualifying[chosen].workspace;
  out->rank_ = static_cast<int>(chosen);
  out->parts_.push_back(std::move(image));
  out->parts_.push_back(std::move(filter));
  out->parts_.push_back(std::move(output));
  out->parts_.push_back(std::move(conv));
  out->parts_.push_back(std::move(op));
  out->parts_.push_back(std::move(graph));
  return std::shared_ptr<const GraphConvPlan>(std::move(out));
}

absl::Status GraphConvPlan::Run(const CudnnHandle& handle, const void* a, const void* b, void* out,
                                void* workspace, absl::string_view context) const {
  ASSIGN_OR_RETURN(BackendDescriptor pack, VariantPack(kind_, a, b, out, workspace, context));
  return CudaStatus(cudnnBackendExecute(handle.get(), plan_.get(), pack.get()),
                    "cudnnBackendExecute", context);
}

}  // namespace reprise::runtime
