// The translation unit of convolutions that includes cudnn-frontend (cmake/cudnn_frontend.cmake
// gives it the include directory and CUDNN_FRONTEND_SKIP_JSON_LIB).
#include "src/runtime/cudnn_conv_graph.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_warm_up.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

namespace fe = ::cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct CudnnConvGraph::Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // Built; execute() is const and thread-safe.
  int64_t workspace_bytes = 0;
  std::string engine;  // cuDNN's name of the chosen engine and knobs.
  bool deterministic = false;
};

namespace {

// Tensor ids of the variant pack.
enum Uid : int64_t { kA = 1, kB, kOut, kScale, kBias, kSum, kSqSum, kAcc };

struct Key {
  ConvKind kind;
  ConvShape shape;
  ConvFusion fusion;
  bool allow_tf32;
  bool deterministic;
  size_t workspace_limit;
  std::string device;

  bool operator==(const Key& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    return H::combine(std::move(h), key.kind, key.shape, key.fusion.scale_bias_relu_input,
                      key.fusion.output_stats, key.fusion.add_to_output, key.allow_tf32,
                      key.deterministic, key.workspace_limit, key.device);
  }
};

// A key's plan, or why it has none: a pattern cuDNN does not support is asked about once per
// process, not once per layer.
using Entry = absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>>;

class PlanCache {
 public:
  static PlanCache& Global() {
    static PlanCache* cache = new PlanCache();
    return *cache;
  }
  absl::Mutex& mu() { return mu_; }
  absl::flat_hash_map<Key, Entry>& entries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entries_; }
  size_t built() {
    absl::MutexLock lock(&mu_);
    return std::count_if(entries_.begin(), entries_.end(),
                         [](const auto& entry) { return entry.second.ok(); });
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// "<context>: cudnn-frontend <step> failed for <what>: <message>". The codes by which the frontend
// says that no engine takes the graph (at this shape, under the numerical-note filters, on this
// device) are Unimplemented, so that callers keep their own kernels; anything else is Internal.
// The support check lists every engine's refusal: the message keeps its first 800 characters.
absl::Status FrontendStatus(fe::error_t error, absl::string_view step, absl::string_view what,
                            absl::string_view context) {
  if (error.is_good()) return absl::OkStatus();
  const fe::error_code_t code = error.get_code();
  const bool unsupported = code == fe::error_code_t::GRAPH_NOT_SUPPORTED ||
                           code == fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED ||
                           code == fe::error_code_t::HEURISTIC_QUERY_FAILED;
  std::string detail = error.get_message();
  if (detail.size() > 800) detail = absl::StrCat(detail.substr(0, 800), " ...");
  std::string message = absl::StrCat(context.empty() ? "" : absl::StrCat(context, ": "),
                                     "cudnn-frontend ", step, " failed for ", what, ": ", detail);
  return unsupported ? absl::UnimplementedError(message) : absl::InternalError(message);
}

fe::DataType_t IoType(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return fe::DataType_t::BFLOAT16;
    case DType::kFloat16:
      return fe::DataType_t::HALF;
    default:
      return fe::DataType_t::FLOAT;
  }
}

// A 4-D tensor of logical extents [outer, c, h, w] (n or k first), stored NCHW or NHWC.
TensorPtr Tensor4d(fe::graph::Graph& graph, const char* name, Uid uid, Layout layout, int64_t outer,
                   int64_t c, int64_t h, int64_t w) {
  const std::vector<int64_t> stride = layout == Layout::kNHWC
                                          ? std::vector<int64_t>{h * w * c, 1, w * c, c}
                                          : std::vector<int64_t>{c * h * w, h * w, w, 1};
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({outer, c, h, w})
                          .set_stride(stride));
}

void SetOutput4d(const TensorPtr& t, Uid uid, Layout layout, DType dtype, int64_t outer, int64_t c,
                 int64_t h, int64_t w) {
  const std::vector<int64_t> stride = layout == Layout::kNHWC
                                          ? std::vector<int64_t>{h * w * c, 1, w * c, c}
                                          : std::vector<int64_t>{c * h * w, h * w, w, 1};
  t->set_output(true)
      .set_uid(uid)
      .set_data_type(IoType(dtype))
      .set_dim({outer, c, h, w})
      .set_stride(stride);
}

// A per-channel vector [1, c, 1, 1] of `type`.
TensorPtr Channels(fe::graph::Graph& graph, const char* name, Uid uid, int64_t c,
                   fe::DataType_t type) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({1, c, 1, 1})
                          .set_stride({c, 1, c, c})
                          .set_data_type(type));
}

void SetChannelsOutput(const TensorPtr& t, Uid uid, int64_t c) {
  t->set_output(true)
      .set_uid(uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({1, c, 1, 1})
      .set_stride({c, 1, c, c});
}

std::string What(const Key& key) {
  return absl::StrCat("conv ", ConvKindName(key.kind),
                      key.fusion.any() ? absl::StrCat(" ", key.fusion.ToString()) : "", " ",
                      key.shape.ToString());
}

// The graph of one key, not built yet.
std::shared_ptr<fe::graph::Graph> Describe(const Key& key) {
  const ConvShape& s = key.shape;
  const int64_t cg = s.c / s.groups;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(IoType(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> pad = {s.pad_h, s.pad_w}, stride = {s.stride_h, s.stride_w},
                             dilation = {s.dilation_h, s.dilation_w};
  switch (key.kind) {
    case ConvKind::kForward: {
      TensorPtr x = Tensor4d(*graph, "x", kA, s.layout, s.n, s.c, s.h, s.w);
      TensorPtr w = Tensor4d(*graph, "w", kB, s.layout, s.k, cg, s.r, s.s);
      if (key.fusion.scale_bias_relu_input) {
        TensorPtr scale = Channels(*graph, "scale", kScale, s.c, IoType(s.dtype));
        TensorPtr bias = Channels(*graph, "bias", kBias, s.c, IoType(s.dtype));
        TensorPtr scaled = graph->pointwise(
            x, scale,
            fe::graph::Pointwise_attributes().set_name("scale").set_mode(fe::PointwiseMode_t::MUL));
        TensorPtr shifted = graph->pointwise(
            scaled, bias,
            fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
        x = graph->pointwise(shifted, fe::graph::Pointwise_attributes().set_name("relu").set_mode(
                                          fe::PointwiseMode_t::RELU_FWD));
      }
      TensorPtr y = graph->conv_fprop(x, w,
                                      fe::graph::Conv_fprop_attributes()
                                          .set_name("fprop")
                                          .set_padding(pad)
                                          .set_stride(stride)
                                          .set_dilation(dilation));
      SetOutput4d(y, kOut, s.layout, s.dtype, s.n, s.k, s.p, s.q);
      if (key.fusion.output_stats) {
        auto [sum, sq_sum] =
            graph->genstats(y, fe::graph::Genstats_attributes().set_name("genstats"));
        SetChannelsOutput(sum, kSum, s.k);
        SetChannelsOutput(sq_sum, kSqSum, s.k);
      }
      return graph;
    }
    case ConvKind::kBackwardData: {
      TensorPtr dy = Tensor4d(*graph, "dy", kA, s.layout, s.n, s.k, s.p, s.q);
      TensorPtr w = Tensor4d(*graph, "w", kB, s.layout, s.k, cg, s.r, s.s);
      TensorPtr dx = graph->conv_dgrad(dy, w,
                                       fe::graph::Conv_dgrad_attributes()
                                           .set_name("dgrad")
                                           .set_padding(pad)
                                           .set_stride(stride)
                                           .set_dilation(dilation));
      if (key.fusion.add_to_output) {
        // The float sum dgrad + acc, rounded once into out (which may alias acc).
        TensorPtr acc = Tensor4d(*graph, "acc", kAcc, s.layout, s.n, s.c, s.h, s.w);
        dx->set_dim({s.n, s.c, s.h, s.w});
        dx = graph->pointwise(dx, acc,
                              fe::graph::Pointwise_attributes()
                                  .set_name("accumulate")
                                  .set_mode(fe::PointwiseMode_t::ADD));
      }
      SetOutput4d(dx, kOut, s.layout, s.dtype, s.n, s.c, s.h, s.w);
      return graph;
    }
    case ConvKind::kBackwardFilter: {
      TensorPtr x = Tensor4d(*graph, "x", kA, s.layout, s.n, s.c, s.h, s.w);
      TensorPtr dy = Tensor4d(*graph, "dy", kB, s.layout, s.n, s.k, s.p, s.q);
      TensorPtr dw = graph->conv_wgrad(dy, x,
                                       fe::graph::Conv_wgrad_attributes()
                                           .set_name("wgrad")
                                           .set_padding(pad)
                                           .set_stride(stride)
                                           .set_dilation(dilation));
      SetOutput4d(dw, kOut, s.layout, s.dtype, s.k, cg, s.r, s.s);
      return graph;
    }
  }
  return graph;
}

// Engines whose numerical notes the options rule out. Down-converting inputs (float32 data run in
// float16) and reduced-precision reductions (16-bit partial sums) are never wanted in training.
// Strict float32 (no TF32) also rules out tensor cores, and FFT and Winograd engines, whose
// transformed-domain rounding scales with the tensor's largest values (as CudnnConv does).
std::vector<fe::NumericalNote_t> BarredNotes(const Key& key) {
  std::vector<fe::NumericalNote_t> notes = {fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                            fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION};
  if (key.deterministic) notes.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  if (key.shape.dtype == DType::kFloat32 && !key.allow_tf32) {
    for (fe::NumericalNote_t note :
         {fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::FFT, fe::NumericalNote_t::WINOGRAD,
          fe::NumericalNote_t::WINOGRAD_TILE_4x4, fe::NumericalNote_t::WINOGRAD_TILE_6x6,
          fe::NumericalNote_t::WINOGRAD_TILE_13x13}) {
      notes.push_back(note);
    }
  }
  return notes;
}

absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> Build(const CudnnHandle& handle,
                                                                  const Key& key,
                                                                  absl::string_view context) {
  const std::string what = What(key);
  auto plan = std::make_shared<CudnnConvGraph::Plan>();
  plan->graph = Describe(key);
  plan->deterministic = key.deterministic;
  fe::graph::Graph& g = *plan->graph;
  RETURN_IF_ERROR(FrontendStatus(g.validate(), "validate", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.build_operation_graph(handle.get()), "build_operation_graph",
                                 what, context));
  // Mode A ranks the engines cuDNN expects to be fastest; the fallback list adds the ones that
  // take any shape, so that a filter leaving none of A's still finds a plan.
  RETURN_IF_ERROR(
      FrontendStatus(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                     "create_execution_plans", what, context));
  g.deselect_numeric_notes(BarredNotes(key));
  g.deselect_workspace_greater_than(static_cast<int64_t>(key.workspace_limit));
  RETURN_IF_ERROR(FrontendStatus(g.check_support(), "check_support", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
                                 "build_plans", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.get_workspace_size(plan->workspace_bytes), "get_workspace_size",
                                 what, context));
  if (plan->workspace_bytes > static_cast<int64_t>(key.workspace_limit)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(context, ": ", what, " chose a plan of ", plan->workspace_bytes,
                     " bytes of workspace; the lane has ", key.workspace_limit));
  }
  RETURN_IF_ERROR(FrontendStatus(g.get_plan_name(plan->engine), "get_plan_name", what, context));
  return std::shared_ptr<const CudnnConvGraph::Plan>(std::move(plan));
}

size_t ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// The plan's first run, ahead of the step's capture (WarmUpInThrowawayCapture), with one
// allocation as large as any operand or the workspace standing in for all of them.
absl::Status WarmUp(const CudnnHandle& handle, const Key& key, const CudnnConvGraph::Plan& plan,
                    absl::string_view context) {
  const ConvShape& s = key.shape;
  const int64_t largest =
      std::max({s.n * s.c * s.h * s.w, s.n * s.k * s.p * s.q, s.k * (s.c / s.groups) * s.r * s.s});
  const size_t bytes = std::max<size_t>(largest * ElementBytes(s.dtype), plan.workspace_bytes);
  return WarmUpInThrowawayCapture(
      handle, bytes,
      [&](void* placeholder) {
        std::unordered_map<int64_t, void*> pack;
        for (Uid uid : {kA, kB, kOut}) pack[uid] = placeholder;
        if (key.fusion.scale_bias_relu_input) pack[kScale] = pack[kBias] = placeholder;
        if (key.fusion.output_stats) pack[kSum] = pack[kSqSum] = placeholder;
        if (key.fusion.add_to_output) pack[kAcc] = placeholder;
        (void)plan.graph->execute(handle.get(), pack, placeholder);
      },
      context);
}

}  // namespace

std::string ConvFusion::ToString() const {
  std::vector<absl::string_view> parts;
  if (scale_bias_relu_input) parts.push_back("sbr");
  if (output_stats) parts.push_back("stats");
  if (add_to_output) parts.push_back("acc");
  return absl::StrJoin(parts, "+");
}

absl::StatusOr<CudnnConvGraph> CudnnConvGraph::Create(const CudnnHandle& handle, ConvKind kind,
                                                      const ConvShape& shape,
                                                      const ConvFusion& fusion,
                                                      const ConvGraphOptions& options,
                                                      absl::string_view context) {
  if (shape.dtype != DType::kFloat32 && !IsLowPrecision(shape.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        context, ": cuDNN graph convolutions run in float32, bfloat16 or float16, got ",
        DTypeName(shape.dtype), " (", shape.ToString(), ")"));
  }
  if (shape.groups < 1 || shape.c % shape.groups != 0 || shape.k % shape.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": groups must divide both channel counts: ", shape.ToString()));
  }
  if ((fusion.scale_bias_relu_input || fusion.output_stats) && kind != ConvKind::kForward) {
    return absl::UnimplementedError(absl::StrCat(context, ": the ", fusion.ToString(),
                                                 " fusion applies to forward convolutions, not ",
                                                 ConvKindName(kind)));
  }
  if (fusion.add_to_output &&
      (kind != ConvKind::kBackwardData || fusion.scale_bias_relu_input || fusion.output_stats)) {
    return absl::UnimplementedError(absl::StrCat(
        context, ": accumulating into the output applies to data gradients alone, not ",
        ConvKindName(kind), " ", fusion.ToString()));
  }
  const Key key{kind,
                shape,
                fusion,
                shape.dtype == DType::kFloat32 && options.allow_tf32,
                options.deterministic,
                options.workspace_limit,
                options.device};
  PlanCache& cache = PlanCache::Global();
  // Builds run under the lock: two lowerings of one shape build it once.
  absl::MutexLock lock(&cache.mu());
  auto& entries = cache.entries();
  auto it = entries.find(key);
  if (it == entries.end()) {
    Entry entry = Build(handle, key, /*context=*/"");
    if (entry.ok()) RETURN_IF_ERROR(WarmUp(handle, key, **entry, context));
    it = entries.emplace(key, std::move(entry)).first;
  }
  if (!it->second.ok()) {
    return absl::Status(it->second.status().code(),
                        absl::StrCat(context, ": ", it->second.status().message()));
  }
  return CudnnConvGraph(kind, shape, fusion, *it->second);
}

size_t CudnnConvGraph::workspace_bytes() const {
  return static_cast<size_t>(plan_->workspace_bytes);
}

size_t CudnnConvGraph::CacheSize() { return PlanCache::Global().built(); }

std::string CudnnConvGraph::Describe() const {
  return absl::StrCat("cudnn graph conv ", ConvKindName(kind_),
                      fusion_.any() ? absl::StrCat(" ", fusion_.ToString()) : "", " ",
                      plan_->engine, " ws ", plan_->workspace_bytes,
                      plan_->deterministic ? " deterministic" : "");
}

absl::Status CudnnConvGraph::Run(const CudnnHandle& handle, const ConvGraphBuffers& b,
                                 void* workspace, absl::string_view context) const {
  if (plan_->workspace_bytes > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", Describe(), " needs ",
                                                   plan_->workspace_bytes,
                                                   " bytes of workspace, got none"));
  }
  std::unordered_map<int64_t, void*> pack = {
      {kA, const_cast<void*>(b.a)}, {kB, const_cast<void*>(b.b)}, {kOut, b.out}};
  if (fusion_.add_to_output) pack[kAcc] = b.acc != nullptr ? const_cast<void*>(b.acc) : b.out;
  if (fusion_.scale_bias_relu_input) {
    if (b.scale == nullptr || b.bias == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": ", Describe(), " needs its input's scale and bias"));
    }
    pack[kScale] = const_cast<void*>(b.scale);
    pack[kBias] = const_cast<void*>(b.bias);
  }
  if (fusion_.output_stats) {
    if (b.sum == nullptr || b.sq_sum == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": ", Describe(), " needs its sum and sq_sum outputs"));
    }
    pack[kSum] = b.sum;
    pack[kSqSum] = b.sq_sum;
    // The sums start from zero on every run, whether or not the engine adds into its outputs
    // (the frontend's own tests hand it zeroed ones): a memset node under capture.
    cudaStream_t stream = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudnnGetStream(handle.get(), &stream), "cudnnGetStream", context));
    const size_t bytes = static_cast<size_t>(shape_.k) * sizeof(float);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.sum, 0, bytes, stream), context);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.sq_sum, 0, bytes, stream), context);
  }
  return FrontendStatus(plan_->graph->execute(handle.get(), pack, workspace), "execute", Describe(),
                        context);
}

}  // namespace reprise::runtime
