// One of the few translation units that include cudnn-frontend (cmake/cudnn_frontend.cmake gives
// them the include directory and CUDNN_FRONTEND_SKIP_JSON_LIB).
#include "src/runtime/cudnn_gelu_product.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_graph_internal.h"
#include "src/runtime/cudnn_warm_up.h"
#include "src/runtime/owners.h"
#include "src/runtime/plan_cache.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

namespace fe = ::cudnn_frontend;
using conv_graph::FrontendStatus;

struct CudnnGeluProduct::Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // Built; execute_plan_at_index() is thread-safe.
  int64_t index = 0;
  int64_t workspace_bytes = 0;
  std::string engine;
  std::string chosen_by;  // "" (the first that builds) or "measured <ms> ms of <n>".
};

namespace {

enum Uid : int64_t { kA = 1, kB, kBias, kPre, kOut };
constexpr int kMeasureRuns = 5;

struct Key {
  GeluProductShape shape;
  std::string device;
  size_t workspace_limit;
  bool measured;
  std::string plan_name;

  bool operator==(const Key& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    const GeluProductShape& s = key.shape;
    return H::combine(std::move(h), s.m, s.n, s.k, s.transpose_a, s.transpose_b, s.dtype,
                      key.device, key.workspace_limit, key.measured, key.plan_name);
  }
};

std::shared_ptr<fe::graph::Tensor_attributes> Tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                     std::vector<int64_t> dim,
                                                     std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dim))
                      .set_stride(std::move(stride)));
}

// The graph of one shape, not built yet: one matmul of op(A) [1, m, k] and op(B) [1, k, n] (a
// transposed operand is the same dims with swapped strides), the bias added into pre, and GELU.
std::shared_ptr<fe::graph::Graph> Describe(const GeluProductShape& s) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(s.dtype == DType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t m = s.m, n = s.n, k = s.k;
  auto a =
      Tensor(*g, "a", kA, {1, m, k},
             s.transpose_a ? std::vector<int64_t>{m * k, 1, m} : std::vector<int64_t>{m * k, k, 1});
  auto b =
      Tensor(*g, "b", kB, {1, k, n},
             s.transpose_b ? std::vector<int64_t>{k * n, 1, k} : std::vector<int64_t>{k * n, n, 1});
  auto product = g->matmul(a, b,
                           fe::graph::Matmul_attributes().set_name("product").set_compute_data_type(
                               fe::DataType_t::FLOAT));
  product->set_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> out_dim{1, m, n}, out_stride{m * n, n, 1};
  auto pointwise = [](const char* name, fe::PointwiseMode_t mode) {
    return fe::graph::Pointwise_attributes().set_name(name).set_mode(mode).set_compute_data_type(
        fe::DataType_t::FLOAT);
  };
  auto bias = Tensor(*g, "bias", kBias, {1, 1, n}, {n, n, 1});
  auto pre = g->pointwise(product, bias, pointwise("bias", fe::PointwiseMode_t::ADD));
  pre->set_output(true).set_uid(kPre).set_dim(out_dim).set_stride(out_stride);
  auto out = g->pointwise(pre, pointwise("gelu", fe::PointwiseMode_t::GELU_APPROX_TANH_FWD));
  out->set_output(true).set_uid(kOut).set_dim(out_dim).set_stride(out_stride);
  return g;
}

std::unordered_map<int64_t, void*> Pack(const GeluProductBuffers& b) {
  return {{kA, const_cast<void*>(b.a)},
          {kB, const_cast<void*>(b.b)},
          {kBias, const_cast<void*>(b.bias)},
          {kPre, b.pre},
          {kOut, b.out}};
}

// The fastest of the first kMeasuredGeluProductCandidates plans that build, fit the workspace
// and run on the options' buffers: the median of kMeasureRuns runs each, after one untimed.
absl::Status ChooseByMeasuring(const CudnnHandle& handle, const Key& key,
                               const GeluProductOptions& options, CudnnGeluProduct::Plan& plan,
                               absl::string_view what) {
  fe::graph::Graph& g = *plan.graph;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudnnGetStream(handle.get(), &stream), "cudnnGetStream", what));
  std::vector<Event> events;
  for (int e = 0; e < 2 * kMeasureRuns; ++e) {
    ASSIGN_OR_RETURN(Event event, Event::Create(cudaEventDefault));
    events.push_back(std::move(event));
  }
  std::unordered_map<int64_t, void*> pack = Pack(options.buffers);
  int candidates = 0;
  double best = -1;
  for (int64_t i = 0;
       i < g.get_execution_plan_count() && candidates < kMeasuredGeluProductCandidates; ++i) {
    int64_t workspace = 0;
    if (!g.build_plan_at_index(i).is_good() ||
        !g.get_workspace_size_plan_at_index(i, workspace).is_good() ||
        workspace > static_cast<int64_t>(key.workspace_limit)) {
      continue;
    }
    bool ran = g.execute_plan_at_index(handle.get(), pack, options.workspace, i).is_good();
    for (int run = 0; ran && run < kMeasureRuns; ++run) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * run].get(), stream), what);
      ran = g.execute_plan_at_index(handle.get(), pack, options.workspace, i).is_good();
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * run + 1].get(), stream), what);
    }
    // A kernel that faulted leaves the context unusable: an error, not a slow candidate.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
    if (!ran) continue;
    std::array<float, kMeasureRuns> ms{};
    for (int run = 0; run < kMeasureRuns; ++run) {
      CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&ms[run], events[2 * run].get(), events[2 * run + 1].get()), what);
    }
    std::sort(ms.begin(), ms.end());
    ++candidates;
    if (best < 0 || ms[kMeasureRuns / 2] < best) {
      best = ms[kMeasureRuns / 2];
      plan.index = i;
    }
  }
  if (candidates == 0) {
    return absl::UnimplementedError(absl::StrCat("cudnn-frontend: no plan for ", what,
                                                 " built, fit the workspace (", key.workspace_limit,
                                                 " bytes) and ran"));
  }
  plan.chosen_by = absl::StrFormat("measured %.4f ms of %d", best, candidates);
  return absl::OkStatus();
}

// The candidate named key.plan_name, where it builds and fits the workspace.
absl::Status ChooseNamed(const Key& key, CudnnGeluProduct::Plan& plan, absl::string_view what) {
  fe::graph::Graph& g = *plan.graph;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    std::string name;
    if (!g.get_plan_name_at_index(i, name).is_good() || name != key.plan_name) continue;
    int64_t workspace = 0;
    if (!g.build_plan_at_index(i).is_good() ||
        !g.get_workspace_size_plan_at_index(i, workspace).is_good() ||
        workspace > static_cast<int64_t>(key.workspace_limit)) {
      return absl::NotFoundError(absl::StrCat("cudnn-frontend: the plan ", key.plan_name, " for ",
                                              what, " does not build or fit the workspace (",
                                              key.workspace_limit, " bytes)"));
    }
    plan.index = i;
    plan.chosen_by = "named";
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("cudnn-frontend: no plan named ", key.plan_name,
                                          " among the candidates for ", what));
}

// The first plan in the list that builds and fits the workspace.
absl::Status ChooseFirst(const Key& key, CudnnGeluProduct::Plan& plan, absl::string_view what) {
  fe::graph::Graph& g = *plan.graph;
  std::string failures;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    int64_t workspace = 0;
    fe::error_t built = g.build_plan_at_index(i);
    if (built.is_good()) built = g.get_workspace_size_plan_at_index(i, workspace);
    if (built.is_good() && workspace <= static_cast<int64_t>(key.workspace_limit)) {
      plan.index = i;
      return absl::OkStatus();
    }
    if (failures.size() < 400) {
      absl::StrAppend(&failures, " [", i, ": ",
                      built.is_good() ? absl::StrCat("workspace ", workspace) : built.get_message(),
                      "]");
    }
  }
  return absl::UnimplementedError(absl::StrCat("cudnn-frontend: no plan for ", what,
                                               " builds and fits the workspace (",
                                               key.workspace_limit, " bytes):", failures));
}

absl::StatusOr<std::shared_ptr<const CudnnGeluProduct::Plan>> Build(
    const CudnnHandle& handle, const Key& key, const GeluProductOptions& options,
    absl::string_view context) {
  const std::string what = key.shape.ToString();
  auto plan = std::make_shared<CudnnGeluProduct::Plan>();
  plan->graph = Describe(key.shape);
  fe::graph::Graph& g = *plan->graph;
  RETURN_IF_ERROR(FrontendStatus(g.validate(), "validate", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.build_operation_graph(handle.get()), "build_operation_graph",
                                 what, context));
  RETURN_IF_ERROR(
      FrontendStatus(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                     "create_execution_plans", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.check_support(), "check_support", what, context));
  absl::Status chosen = !key.plan_name.empty() ? ChooseNamed(key, *plan, what)
                        : key.measured ? ChooseByMeasuring(handle, key, options, *plan, what)
                                       : ChooseFirst(key, *plan, what);
  if (!chosen.ok()) {
    return absl::Status(chosen.code(), absl::StrCat(context, ": ", chosen.message()));
  }
  // Measuring built every candidate it timed; the chosen one is built again so that it is the
  // graph's last build, whatever the frontend keeps per build.
  RETURN_IF_ERROR(
      FrontendStatus(g.build_plan_at_index(plan->index), "build_plan_at_index", what, context));
  RETURN_IF_ERROR(
      FrontendStatus(g.get_workspace_size_plan_at_index(plan->index, plan->workspace_bytes),
                     "get_workspace_size_plan_at_index", what, context));
  (void)g.get_plan_name_at_index(plan->index, plan->engine);
  // The first run outside the step's capture: cuDNN may load kernels then.
  const GeluProductShape& s = key.shape;
  const size_t bytes =
      std::max<size_t>({static_cast<size_t>(std::max({s.m * s.k, s.k * s.n, s.m * s.n})) * 2,
                        static_cast<size_t>(plan->workspace_bytes)});
  RETURN_IF_ERROR(WarmUpInThrowawayCapture(
      handle, bytes,
      [&](void* placeholder) {
        std::unordered_map<int64_t, void*> pack;
        for (Uid uid : {kA, kB, kBias, kPre, kOut}) pack[uid] = placeholder;
        (void)g.execute_plan_at_index(handle.get(), pack, placeholder, plan->index);
      },
      context));
  return std::shared_ptr<const CudnnGeluProduct::Plan>(std::move(plan));
}

}  // namespace

std::string GeluProductShape::ToString() const {
  return absl::StrCat("gelu ", DTypeName(dtype), " [", transpose_a ? k : m, "x",
                      transpose_a ? m : k, "]", transpose_a ? "^T" : "", "·[", transpose_b ? n : k,
                      "x", transpose_b ? k : n, "]", transpose_b ? "^T" : "");
}

absl::Status GeluProductShapeSupported(const GeluProductShape& s) {
  if (s.dtype != DType::kBFloat16 && s.dtype != DType::kFloat16) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN's GELU products run in bfloat16 or float16, not ", DTypeName(s.dtype)));
  }
  if (s.m < 1 || s.n < 1 || s.k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("empty product ", s.ToString()));
  }
  if (s.n % 8 != 0 || s.k % 8 != 0 || (s.transpose_a && s.m % 8 != 0)) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN's GELU products need rows of whole 16-byte vectors: ", s.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CudnnGeluProduct> CudnnGeluProduct::Create(const CudnnHandle& handle,
                                                          const GeluProductShape& shape,
                                                          const GeluProductOptions& options,
                                                          absl::string_view context) {
  if (absl::Status supported = GeluProductShapeSupported(shape); !supported.ok()) {
    return absl::Status(supported.code(), absl::StrCat(context, ": ", supported.message()));
  }
  const bool named = !options.plan_name.empty();
  const Key key{shape, options.device, options.workspace_limit, options.measure && !named,
                options.plan_name};
  ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan,
                   (PlanCache<Key, Plan>::Global().FindOrBuild(
                       key, [&] { return Build(handle, key, options, context); })));
  return CudnnGeluProduct(shape, std::move(plan));
}

absl::Status CudnnGeluProduct::Run(const CudnnHandle& handle, const GeluProductBuffers& buffers,
                                   void* workspace, absl::string_view context) const {
  std::unordered_map<int64_t, void*> pack = Pack(buffers);
  return FrontendStatus(
      plan_->graph->execute_plan_at_index(handle.get(), pack, workspace, plan_->index), "execute",
      Describe(), context);
}

size_t CudnnGeluProduct::workspace_bytes() const {
  return static_cast<size_t>(plan_->workspace_bytes);
}

const std::string& CudnnGeluProduct::engine() const { return plan_->engine; }

std::string GeluProductRaceRecordKey(const GeluProductShape& shape, size_t workspace_limit,
                                     absl::string_view device, int64_t cublaslt_version) {
  return runtime::GeluProductRecordKey(absl::StrCat(shape.ToString(), " ws ", workspace_limit),
                                       device, static_cast<int64_t>(cudnnGetVersion()),
                                       CUDNN_FRONTEND_VERSION, cublaslt_version);
}

size_t CudnnGeluProduct::CacheSize() { return PlanCache<Key, Plan>::Global().size(); }

std::string CudnnGeluProduct::Describe() const {
  return absl::StrCat("cudnn ", shape_.ToString(), " engine ", plan_->engine, " ws ",
                      plan_->workspace_bytes,
                      plan_->chosen_by.empty() ? "" : absl::StrCat(" ", plan_->chosen_by));
}

}  // namespace reprise::runtime
