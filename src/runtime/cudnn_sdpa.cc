// The one translation unit that includes cudnn-frontend (cmake/cudnn_frontend.cmake gives it the
// include directory and CUDNN_FRONTEND_SKIP_JSON_LIB).
#include "src/runtime/cudnn_sdpa.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_warm_up.h"
#include "src/runtime/owners.h"
#include "src/runtime/plan_cache.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

namespace fe = ::cudnn_frontend;

struct CudnnSdpa::Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // Built; execute() is const and thread-safe.
  int64_t workspace_bytes = 0;
};

namespace {

// Tensor ids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Key {
  SdpaPass pass;
  SdpaShape shape;
  bool deterministic;
  std::string device;

  bool operator==(const Key& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    const SdpaShape& s = key.shape;
    return H::combine(std::move(h), key.pass, s.batch, s.heads, s.seq, s.head_dim, s.dtype,
                      s.row_stride, key.deterministic, key.device);
  }
};

// "<context>: cudnn-frontend <step> failed for <what>: <message>". GRAPH_NOT_SUPPORTED (a shape
// or device cuDNN's attention cannot take) is Unimplemented; anything else Internal.
absl::Status FrontendStatus(fe::error_t error, absl::string_view step, absl::string_view what,
                            absl::string_view context) {
  if (error.is_good()) return absl::OkStatus();
  const bool unsupported = error.get_code() == fe::error_code_t::GRAPH_NOT_SUPPORTED;
  std::string message =
      absl::StrCat(context.empty() ? "" : absl::StrCat(context, ": "), "cudnn-frontend ", step,
                   " failed for ", what, ": ", error.get_message());
  return unsupported ? absl::UnimplementedError(message) : absl::InternalError(message);
}

fe::DataType_t IoType(DType dtype) {
  return dtype == DType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
}

// Logical [B, H, T, D] over memory [B, T, H, D] with `row` elements between sequence positions.
std::vector<int64_t> Dims(const SdpaShape& s) { return {s.batch, s.heads, s.seq, s.head_dim}; }
std::vector<int64_t> Strides(const SdpaShape& s, int64_t row) {
  return {s.seq * row, s.head_dim, row, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> Input(fe::graph::Graph& graph, const char* name,
                                                    Uid uid, const SdpaShape& s, int64_t row) {
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(Dims(s)).set_stride(
          Strides(s, row)));
}

std::shared_ptr<fe::graph::Tensor_attributes> Stats(fe::graph::Graph& graph, const SdpaShape& s) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name("stats")
                          .set_uid(kStats)
                          .set_dim({s.batch, s.heads, s.seq, 1})
                          .set_stride({s.heads * s.seq, s.seq, 1, 1})
                          .set_data_type(fe::DataType_t::FLOAT));
}

// The graph of one pass, not built yet. `implementation` picks the forward's SDPA node: cuDNN's
// unified node or the composite of matmuls and softmax (AUTO: the unified one where it can).
std::shared_ptr<fe::graph::Graph> Describe(
    const Key& key,
    fe::AttentionImplementation_t implementation = fe::AttentionImplementation_t::AUTO) {
  const SdpaShape& s = key.shape;
  const int64_t width = s.heads * s.head_dim;  // O's row stride.
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(IoType(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = Input(*graph, "q", kQ, s, s.row_stride);
  auto k = Input(*graph, "k", kK, s, s.row_stride);
  auto v = Input(*graph, "v", kV, s, s.row_stride);
  if (key.pass == SdpaPass::kForward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("causal_attention")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_implementation(implementation);
    auto [o, stats] = graph->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(Dims(s)).set_stride(Strides(s, width));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.batch, s.heads, s.seq, 1})
        .set_stride({s.heads * s.seq, s.seq, 1, 1});
    return graph;
  }
  auto o = Input(*graph, "o", kO, s, width);
  auto d_o = Input(*graph, "d_o", kDO, s, width);
  auto stats = Stats(*graph, s);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_grad")
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_deterministic_algorithm(key.deterministic);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
  dq->set_output(true).set_uid(kDQ).set_dim(Dims(s)).set_stride(Strides(s, s.row_stride));
  dk->set_output(true).set_uid(kDK).set_dim(Dims(s)).set_stride(Strides(s, s.row_stride));
  dv->set_output(true).set_uid(kDV).set_dim(Dims(s)).set_stride(Strides(s, s.row_stride));
  return graph;
}

absl::StatusOr<std::shared_ptr<const CudnnSdpa::Plan>> Build(const CudnnHandle& handle,
                                                             const Key& key,
                                                             absl::string_view context) {
  const std::string what =
      absl::StrCat("sdpa ", key.pass == SdpaPass::kForward ? "fwd " : "bwd ", key.shape.ToString());
  auto plan = std::make_shared<CudnnSdpa::Plan>();
  plan->graph = Describe(key);
  fe::graph::Graph& g = *plan->graph;
  RETURN_IF_ERROR(FrontendStatus(g.validate(), "validate", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.build_operation_graph(handle.get()), "build_operation_graph",
                                 what, context));
  RETURN_IF_ERROR(FrontendStatus(g.create_execution_plans({fe::HeurMode_t::A}),
                                 "create_execution_plans", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.check_support(handle.get()), "check_support", what, context));
  RETURN_IF_ERROR(
      FrontendStatus(g.build_plans(handle.get(), fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
                     "build_plans", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.get_workspace_size(plan->workspace_bytes), "get_workspace_size",
                                 what, context));
  return std::shared_ptr<const CudnnSdpa::Plan>(std::move(plan));
}

// The plan's first run, ahead of the step's capture (WarmUpInThrowawayCapture), with one
// allocation as large as any operand or the workspace standing in for all of them.
absl::Status WarmUp(const CudnnHandle& handle, const Key& key, const CudnnSdpa::Plan& plan,
                    absl::string_view context) {
  const SdpaShape& s = key.shape;
  const size_t bytes = std::max<size_t>(s.batch * s.seq * s.row_stride * 2, plan.workspace_bytes);
  return WarmUpInThrowawayCapture(
      handle, bytes,
      [&](void* placeholder) {
        std::unordered_map<int64_t, void*> pack;
        for (Uid uid : {kQ, kK, kV, kO, kStats}) pack[uid] = placeholder;
        if (key.pass == SdpaPass::kBackward) {
          for (Uid uid : {kDO, kDQ, kDK, kDV}) pack[uid] = placeholder;
        }
        (void)plan.graph->execute(handle.get(), pack, placeholder);
      },
      context);
}

}  // namespace

std::string SdpaShape::ToString() const {
  return absl::StrCat(DTypeName(dtype), " B=", batch, " H=", heads, " T=", seq, " D=", head_dim,
                      " row ", row_stride);
}

absl::Status SdpaShapeSupported(const SdpaShape& s) {
  if (!IsLowPrecision(s.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN's fused attention computes in bfloat16 or float16, not ", DTypeName(s.dtype)));
  }
  if (s.batch < 1 || s.heads < 1 || s.seq < 1 || s.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("empty attention shape ", s.ToString()));
  }
  if (s.head_dim % 8 != 0 || s.head_dim > 256) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN's fused attention needs a head dimension that is a multiple of 8 and "
                     "at most 256, got ",
                     s.head_dim));
  }
  if (s.row_stride % 8 != 0 || s.row_stride < s.heads * s.head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN's fused attention needs rows of whole 16-byte vectors, got a row stride of ",
        s.row_stride, " elements for ", s.heads, " heads of ", s.head_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<CudnnSdpa> CudnnSdpa::Create(const CudnnHandle& handle, SdpaPass pass,
                                            const SdpaShape& shape, const SdpaOptions& options,
                                            absl::string_view context) {
  if (absl::Status supported = SdpaShapeSupported(shape); !supported.ok()) {
    return absl::Status(supported.code(), absl::StrCat(context, ": ", supported.message()));
  }
  const bool deterministic = pass == SdpaPass::kBackward && options.deterministic;
  const Key key{pass, shape, deterministic, options.device};
  // Builds run under the cache's lock: two lowerings of one shape build it once.
  ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan,
                   (PlanCache<Key, Plan>::Global().FindOrBuild(
                       key, [&]() -> absl::StatusOr<std::shared_ptr<const Plan>> {
                         ASSIGN_OR_RETURN(std::shared_ptr<const Plan> built,
                                          Build(handle, key, context));
                         RETURN_IF_ERROR(WarmUp(handle, key, *built, context));
                         return built;
                       })));
  return CudnnSdpa(pass, shape, deterministic, std::move(plan));
}

size_t CudnnSdpa::workspace_bytes() const { return static_cast<size_t>(plan_->workspace_bytes); }

size_t CudnnSdpa::CacheSize() { return PlanCache<Key, Plan>::Global().size(); }

std::string CudnnSdpa::Describe() const {
  return absl::StrCat("cudnn sdpa ", pass_ == SdpaPass::kForward ? "fwd " : "bwd ",
                      shape_.ToString(), deterministic_ ? " deterministic" : "", " ws ",
                      plan_->workspace_bytes);
}

absl::Status CudnnSdpa::RunForward(const CudnnHandle& handle, const SdpaForwardBuffers& b,
                                   void* workspace, absl::string_view context) const {
  if (pass_ != SdpaPass::kForward) {
    return absl::InternalError(absl::StrCat(context, ": RunForward on a backward sdpa plan"));
  }
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(b.q)},
                                             {kK, const_cast<void*>(b.k)},
                                             {kV, const_cast<void*>(b.v)},
                                             {kO, b.o},
                                             {kStats, b.stats}};
  return FrontendStatus(plan_->graph->execute(handle.get(), pack, workspace), "execute", Describe(),
                        context);
}

absl::Status CudnnSdpa::RunBackward(const CudnnHandle& handle, const SdpaBackwardBuffers& b,
                                    void* workspace, absl::string_view context) const {
  if (pass_ != SdpaPass::kBackward) {
    return absl::InternalError(absl::StrCat(context, ": RunBackward on a forward sdpa plan"));
  }
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(b.q)},
                                             {kK, const_cast<void*>(b.k)},
                                             {kV, const_cast<void*>(b.v)},
                                             {kO, const_cast<void*>(b.o)},
                                             {kDO, const_cast<void*>(b.d_o)},
                                             {kStats, const_cast<void*>(b.stats)},
                                             {kDQ, b.dq},
                                             {kDK, b.dk},
                                             {kDV, b.dv}};
  return FrontendStatus(plan_->graph->execute(handle.get(), pack, workspace), "execute", Describe(),
                        context);
}

namespace {

// A device buffer of at least `bytes`, 0x3c in every byte: 0.0115 in bfloat16, 1.06 in float16,
// finite scores for every plan.
absl::StatusOr<DeviceBuffer> Filled(size_t bytes, absl::string_view what) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(std::max<size_t>(bytes, 256)));
  CUDA_RETURN_IF_ERROR(cudaMemset(buffer.data(), 0x3c, buffer.bytes()), what);
  return buffer;
}

const char* ImplementationName(fe::AttentionImplementation_t implementation) {
  switch (implementation) {
    case fe::AttentionImplementation_t::UNIFIED:
      return "unified";
    case fe::AttentionImplementation_t::COMPOSITE:
      return "composite";
    default:
      return "";
  }
}

// Times every plan of `graph` (validated and lowered, not yet listed) on `pack`.
absl::Status TimePlans(const CudnnHandle& handle, fe::graph::Graph& g,
                       std::unordered_map<int64_t, void*>& pack, int runs,
                       const std::string& implementation, const std::string& what,
                       std::vector<SdpaCandidate>& out) {
  fe::error_t listed =
      g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK});
  if (listed.is_good()) listed = g.check_support(handle.get());
  if (!listed.is_good()) {  // No plan of this graph runs here: say so, as a candidate that failed.
    out.push_back({implementation, "", 0, -1, listed.get_message()});
    return absl::OkStatus();
  }
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudnnGetStream(handle.get(), &stream), what);
  std::vector<Event> events;
  for (int e = 0; e < 2 * runs; ++e) {
    ASSIGN_OR_RETURN(Event event, Event::Create(cudaEventDefault));
    events.push_back(std::move(event));
  }
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    SdpaCandidate candidate;
    candidate.implementation = implementation;
    candidate.median_ms = -1;
    (void)g.get_plan_name_at_index(i, candidate.engine);
    // The heuristics' modes list some plans more than once: each is timed once.
    const bool timed_already = std::any_of(out.begin(), out.end(), [&](const SdpaCandidate& c) {
      return c.implementation == implementation && !c.engine.empty() &&
             c.engine == candidate.engine;
    });
    if (timed_already) continue;
    if (fe::error_t built = g.build_plan_at_index(i); !built.is_good()) {
      candidate.error = built.get_message();
      out.push_back(std::move(candidate));
      continue;
    }
    RETURN_IF_ERROR(FrontendStatus(g.get_workspace_size_plan_at_index(i, candidate.workspace_bytes),
                                   "get_workspace_size", what, ""));
    ASSIGN_OR_RETURN(const DeviceBuffer workspace, Filled(candidate.workspace_bytes, what));
    void* const ws = workspace.data();
    fe::error_t ran = g.execute_plan_at_index(handle.get(), pack, ws, i);
    for (int run = 0; ran.is_good() && run < runs; ++run) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * run].get(), stream), what);
      ran = g.execute_plan_at_index(handle.get(), pack, ws, i);
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * run + 1].get(), stream), what);
    }
    // A kernel that faulted leaves the context unusable: that is an error, not a slow candidate.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
    if (!ran.is_good()) {
      candidate.error = ran.get_message();
      out.push_back(std::move(candidate));
      continue;
    }
    std::vector<float> ms;
    for (int run = 0; run < runs; ++run) {
      ASSIGN_OR_RETURN(const float run_ms, ElapsedMs(events[2 * run], events[2 * run + 1]));
      ms.push_back(run_ms);
    }
    std::sort(ms.begin(), ms.end());
    candidate.median_ms = ms[runs / 2];
    out.push_back(std::move(candidate));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<SdpaCandidate>> TimeSdpaCandidates(const CudnnHandle& handle,
                                                              SdpaPass pass, const SdpaShape& shape,
                                                              int runs, absl::string_view context) {
  if (absl::Status supported = SdpaShapeSupported(shape); !supported.ok()) {
    return absl::Status(supported.code(), absl::StrCat(context, ": ", supported.message()));
  }
  if (runs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": runs must be positive, got ", runs));
  }
  const SdpaShape& s = shape;
  const std::string what = absl::StrCat(context, ": sdpa candidates ", s.ToString());
  const size_t rows = static_cast<size_t>(s.batch * s.seq);
  const size_t packed = rows * s.row_stride * 2, plain = rows * s.heads * s.head_dim * 2;
  // Q, K and V packed in one buffer (GPT-2's c_attn output) or, with a narrower row stride, all
  // three reading the same one; dQ, dK and dV alike.
  const size_t k_offset = s.row_stride >= 3 * s.heads * s.head_dim ? s.heads * s.head_dim * 2 : 0;
  std::vector<DeviceBuffer> buffers;
  std::unordered_map<int64_t, void*> pack;
  const auto add = [&](size_t bytes) -> absl::StatusOr<char*> {
    ASSIGN_OR_RETURN(DeviceBuffer buffer, Filled(bytes, what));
    buffers.push_back(std::move(buffer));
    return static_cast<char*>(buffers.back().data());
  };
  ASSIGN_OR_RETURN(char* qkv, add(packed));
  pack[kQ] = qkv;
  pack[kK] = qkv + k_offset;
  pack[kV] = qkv + 2 * k_offset;
  ASSIGN_OR_RETURN(pack[kO], add(plain));
  ASSIGN_OR_RETURN(pack[kStats], add(rows * s.heads * 4));
  // The backward reads O and the statistics of a forward run by the default plan.
  ASSIGN_OR_RETURN(CudnnSdpa forward,
                   CudnnSdpa::Create(handle, SdpaPass::kForward, s, {}, context));
  {
    ASSIGN_OR_RETURN(const DeviceBuffer workspace, Filled(forward.workspace_bytes(), what));
    RETURN_IF_ERROR(forward.RunForward(
        handle, {pack[kQ], pack[kK], pack[kV], pack[kO], pack[kStats]}, workspace.data(), context));
  }
  std::vector<SdpaCandidate> out;
  const Key key{pass, s, /*deterministic=*/false, ""};
  if (pass == SdpaPass::kBackward) {
    ASSIGN_OR_RETURN(pack[kDO], add(plain));
    ASSIGN_OR_RETURN(char* dqkv, add(packed));
    pack[kDQ] = dqkv;
    pack[kDK] = dqkv + k_offset;
    pack[kDV] = dqkv + 2 * k_offset;
    std::shared_ptr<fe::graph::Graph> graph = Describe(key);
    RETURN_IF_ERROR(FrontendStatus(graph->validate(), "validate", what, ""));
    RETURN_IF_ERROR(FrontendStatus(graph->build_operation_graph(handle.get()),
                                   "build_operation_graph", what, ""));
    RETURN_IF_ERROR(TimePlans(handle, *graph, pack, runs, "", what, out));
    return out;
  }
  for (fe::AttentionImplementation_t implementation :
       {fe::AttentionImplementation_t::UNIFIED, fe::AttentionImplementation_t::COMPOSITE}) {
    std::shared_ptr<fe::graph::Graph> graph = Describe(key, implementation);
    const std::string name = ImplementationName(implementation);
    fe::error_t valid = graph->validate();
    if (valid.is_good()) valid = graph->build_operation_graph(handle.get());
    if (!valid.is_good()) {  // This implementation cannot take the shape: say so, try the next.
      out.push_back({name, "", 0, -1, valid.get_message()});
      continue;
    }
    RETURN_IF_ERROR(TimePlans(handle, *graph, pack, runs, name, what, out));
  }
  return out;
}

}  // namespace reprise::runtime
