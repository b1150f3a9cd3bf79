// Choosing, caching and running graph-API convolution plans (cmake/cudnn_frontend.cmake gives this
// file the include directory and CUDNN_FRONTEND_SKIP_JSON_LIB).
#include "src/runtime/cudnn_conv_graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_graph_internal.h"
#include "src/runtime/cudnn_warm_up.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {

namespace {

using conv_graph::BarredNotes;
using conv_graph::DescribeGraph;
using conv_graph::FrontendStatus;
using conv_graph::Key;
using conv_graph::What;
using enum conv_graph::Uid;

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
  ConvGraphStats& stats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stats_; }
  size_t built() {
    absl::MutexLock lock(&mu_);
    return std::count_if(entries_.begin(), entries_.end(),
                         [](const auto& entry) { return entry.second.ok(); });
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  ConvGraphStats stats_ ABSL_GUARDED_BY(mu_);
};

// The graph of `key` validated and lowered to cuDNN's operation graph; no engine chosen yet.
absl::StatusOr<std::shared_ptr<CudnnConvGraph::Plan>> Prepare(const CudnnHandle& handle,
                                                              const Key& key,
                                                              absl::string_view what,
                                                              absl::string_view context) {
  auto plan = std::make_shared<CudnnConvGraph::Plan>();
  plan->graph = DescribeGraph(key);
  plan->deterministic = key.deterministic;
  fe::graph::Graph& g = *plan->graph;
  RETURN_IF_ERROR(FrontendStatus(g.validate(), "validate", what, context));
  RETURN_IF_ERROR(FrontendStatus(g.build_operation_graph(handle.get()), "build_operation_graph",
                                 what, context));
  return plan;
}

// Adds the wall time since `start` to `ms`.
void Lap(absl::Time start, double& ms) { ms += absl::ToDoubleMilliseconds(absl::Now() - start); }

// Builds candidate `index` of `plan`, booking its wall time (and the slowest build) in `stats`.
fe::error_t BuildTimed(CudnnConvGraph::Plan& plan, int64_t index, absl::string_view what,
                       ConvGraphStats& stats) {
  const absl::Time start = absl::Now();
  fe::error_t built = plan.graph->build_plan_at_index(index);
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  stats.build_ms += ms;
  if (ms > stats.slowest_build_ms) {
    std::string engine;
    (void)plan.graph->get_plan_name_at_index(index, engine);
    stats.slowest_build_ms = ms;
    stats.slowest_build = absl::StrCat(what, " ", engine);
  }
  return built;
}

// The engine configurations to choose from: mode A ranks the engines cuDNN expects to be
// fastest; the fallback list adds the ones that take any shape, so that a filter leaving none of
// A's still finds a plan.
absl::Status ListCandidates(const Key& key, fe::graph::Graph& g, absl::string_view what,
                            absl::string_view context) {
  RETURN_IF_ERROR(
      FrontendStatus(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                     "create_execution_plans", what, context));
  g.deselect_numeric_notes(BarredNotes(key));
  g.deselect_workspace_greater_than(static_cast<int64_t>(key.workspace_limit));
  return FrontendStatus(g.check_support(), "check_support", what, context);
}

// Prepare, then ListCandidates, their wall time booked as lowering.
absl::StatusOr<std::shared_ptr<CudnnConvGraph::Plan>> PrepareAndList(const CudnnHandle& handle,
                                                                     const Key& key,
                                                                     absl::string_view what,
                                                                     ConvGraphStats& stats) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<CudnnConvGraph::Plan> plan, Prepare(handle, key, what, ""));
  RETURN_IF_ERROR(ListCandidates(key, *plan->graph, what, ""));
  Lap(start, stats.lower_ms);
  return plan;
}

// The chosen plan's workspace (within the lane's) and name.
absl::Status DescribeChoice(const Key& key, CudnnConvGraph::Plan& plan, absl::string_view what,
                            absl::string_view context) {
  fe::graph::Graph& g = *plan.graph;
  RETURN_IF_ERROR(
      FrontendStatus(g.get_workspace_size_plan_at_index(plan.index, plan.workspace_bytes),
                     "get_workspace_size", what, context));
  if (plan.workspace_bytes > static_cast<int64_t>(key.workspace_limit)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(context, ": ", what, " chose a plan of ", plan.workspace_bytes,
                     " bytes of workspace; the lane has ", key.workspace_limit));
  }
  return FrontendStatus(g.get_plan_name_at_index(plan.index, plan.engine), "get_plan_name", what,
                        context);
}

// The heuristics' first candidate that builds.
absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> BuildByHeuristics(
    const CudnnHandle& handle, const Key& key, absl::string_view what, ConvGraphStats& stats) {
  ASSIGN_OR_RETURN(std::shared_ptr<CudnnConvGraph::Plan> plan,
                   PrepareAndList(handle, key, what, stats));
  fe::graph::Graph& g = *plan->graph;
  std::string failures;
  for (plan->index = 0; plan->index < g.get_execution_plan_count(); ++plan->index) {
    fe::error_t built = BuildTimed(*plan, plan->index, what, stats);
    if (built.is_good()) break;
    absl::StrAppend(&failures, failures.empty() ? "" : "; ", built.get_message());
  }
  if (plan->index == g.get_execution_plan_count()) {
    return absl::UnimplementedError(absl::StrCat("cudnn-frontend build_plans failed for ", what,
                                                 ": ", failures.substr(0, 800)));
  }
  RETURN_IF_ERROR(DescribeChoice(key, *plan, what, ""));
  return std::shared_ptr<const CudnnConvGraph::Plan>(std::move(plan));
}

// The variant pack of a run on `b`: the operands, and the fusion's buffers.
std::unordered_map<int64_t, void*> Pack(const ConvFusion& fusion, const ConvGraphBuffers& b) {
  std::unordered_map<int64_t, void*> pack = {
      {kA, const_cast<void*>(b.a)}, {kB, const_cast<void*>(b.b)}, {kOut, b.out}};
  if (fusion.add_to_output) pack[kAcc] = b.acc != nullptr ? const_cast<void*>(b.acc) : b.out;
  if (fusion.scale_bias_relu_input) {
    pack[kScale] = const_cast<void*>(b.scale);
    pack[kBias] = const_cast<void*>(b.bias);
  }
  if (fusion.output_stats) {
    pack[kSum] = b.sum;
    pack[kSqSum] = b.sq_sum;
  }
  return pack;
}

// What a run of `fusion` needs that `b` lacks ("" when nothing).
std::string MissingBuffers(const ConvFusion& fusion, const ConvGraphBuffers& b) {
  if (b.a == nullptr || b.b == nullptr || b.out == nullptr) return "its operands";
  if (fusion.scale_bias_relu_input && (b.scale == nullptr || b.bias == nullptr)) {
    return "its input's scale and bias";
  }
  if (fusion.output_stats && (b.sum == nullptr || b.sq_sum == nullptr)) {
    return "its sum and sq_sum outputs";
  }
  return "";
}

// Everything but the device that a measured choice depends on, for its record's key.
std::string KeyText(const Key& key) {
  return absl::StrCat(What(key), "\ntf32 ", key.allow_tf32, " deterministic ", key.deterministic,
                      " workspace ", key.workspace_limit);
}

struct MeasuredPlan {
  std::shared_ptr<const CudnnConvGraph::Plan> plan;
  PlanRecord record;
};

// Times the heuristics' first kConvMeasuredCandidates plans that build and fit the workspace, on
// the options' buffers, and keeps the one of least median time (the first of equals).
absl::StatusOr<MeasuredPlan> BuildByMeasuring(const CudnnHandle& handle, const Key& key,
                                              const ConvGraphOptions& options,
                                              absl::string_view what, ConvGraphStats& stats) {
  ASSIGN_OR_RETURN(std::shared_ptr<CudnnConvGraph::Plan> plan,
                   PrepareAndList(handle, key, what, stats));
  fe::graph::Graph& g = *plan->graph;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudnnGetStream(handle.get(), &stream), "cudnnGetStream", what));
  struct Events {
    std::array<cudaEvent_t, 2 * kConvMeasureRuns> at{};
    ~Events() {
      for (cudaEvent_t event : at) {
        if (event != nullptr) (void)cudaEventDestroy(event);
      }
    }
  } events;
  for (cudaEvent_t& event : events.at) CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), what);
  std::unordered_map<int64_t, void*> pack = Pack(key.fusion, options.measure_buffers);
  PlanRecord record;
  std::string failures;
  for (int64_t i = 0;
       i < g.get_execution_plan_count() && record.candidates < kConvMeasuredCandidates; ++i) {
    int64_t workspace = 0;
    if (!g.build_plan_at_index(i).is_good() ||
        !g.get_workspace_size_plan_at_index(i, workspace).is_good() ||
        workspace > static_cast<int64_t>(key.workspace_limit)) {
      continue;
    }
    bool ran = g.execute_plan_at_index(handle.get(), pack, options.measure_workspace, i).is_good();
    for (int run = 0; ran && run < kConvMeasureRuns; ++run) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events.at[2 * run], stream), what);
      ran = g.execute_plan_at_index(handle.get(), pack, options.measure_workspace, i).is_good();
      CUDA_RETURN_IF_ERROR(cudaEventRecord(events.at[2 * run + 1], stream), what);
    }
    // A kernel that faulted leaves the context unusable: that is an error, not a slow candidate.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
    if (!ran) continue;
    std::array<float, kConvMeasureRuns> ms{};
    for (int run = 0; run < kConvMeasureRuns; ++run) {
      CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&ms[run], events.at[2 * run], events.at[2 * run + 1]), what);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[kConvMeasureRuns / 2];
    ++record.candidates;
    if (record.median_ms == 0 || median < record.median_ms) {
      record.median_ms = std::max(median, 1e-6);
      plan->index = i;
    }
  }
  if (record.candidates == 0) {
    return absl::UnimplementedError(absl::StrCat("cudnn-frontend: no candidate plan for ", what,
                                                 " built, fit the workspace (", key.workspace_limit,
                                                 " bytes) and ran"));
  }
  RETURN_IF_ERROR(DescribeChoice(key, *plan, what, ""));
  record.name = plan->engine;
  plan->chosen_by = absl::StrFormat("measured %.4f ms of %d", record.median_ms, record.candidates);
  return MeasuredPlan{std::move(plan), std::move(record)};
}

// The one plan a record names, found among the candidates the measurement chose from (same key,
// same filters) and built alone.
absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> BuildFromRecord(
    const CudnnHandle& handle, const Key& key, const PlanRecord& record, absl::string_view what,
    ConvGraphStats& stats) {
  ASSIGN_OR_RETURN(std::shared_ptr<CudnnConvGraph::Plan> plan,
                   PrepareAndList(handle, key, what, stats));
  fe::graph::Graph& g = *plan->graph;
  for (plan->index = 0; plan->index < g.get_execution_plan_count(); ++plan->index) {
    std::string name;
    if (g.get_plan_name_at_index(plan->index, name).is_good() && name == record.name) break;
  }
  if (plan->index == g.get_execution_plan_count()) {
    return absl::NotFoundError(
        absl::StrCat("names ", record.name, ", which is not among the candidates for ", what));
  }
  RETURN_IF_ERROR(
      FrontendStatus(BuildTimed(*plan, plan->index, what, stats), "build_plan_at_index", what, ""));
  RETURN_IF_ERROR(DescribeChoice(key, *plan, what, ""));
  plan->chosen_by =
      absl::StrFormat("measured %.4f ms of %d (record)", record.median_ms, record.candidates);
  return std::shared_ptr<const CudnnConvGraph::Plan>(std::move(plan));
}

// Builds the plan of `key` as its options ask, counting how in `stats`.
absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> Build(const CudnnHandle& handle,
                                                                  const Key& key,
                                                                  const ConvGraphOptions& options,
                                                                  ConvGraphStats& stats) {
  const std::string what = What(key);
  if (!key.measured) {
    absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> plan =
        BuildByHeuristics(handle, key, what, stats);
    if (plan.ok()) ++stats.heuristic_plans;
    return plan;
  }
  std::string record_key;
  if (options.records != nullptr) {
    record_key = ConvPlanRecordKey(KeyText(key), key.device,
                                   static_cast<int64_t>(cudnnGetVersion()), CUDNN_FRONTEND_VERSION);
    if (std::optional<std::string> text =
            options.records->FindRecord(record_key, kConvPlanRecordKind)) {
      absl::StatusOr<PlanRecord> record = DecodeConvPlanRecord(*text);
      absl::StatusOr<std::shared_ptr<const CudnnConvGraph::Plan>> plan =
          record.ok() ? BuildFromRecord(handle, key, *record, what, stats) : record.status();
      if (plan.ok()) {
        ++stats.record_plans;
        return plan;
      }
      ++stats.records_discarded;
      absl::FPrintF(stderr, "reprise: measuring %s again: its plan record %s\n", what,
                    plan.status().ToString());
    }
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(MeasuredPlan measured, BuildByMeasuring(handle, key, options, what, stats));
  ++stats.measured_plans;
  stats.candidates_timed += measured.record.candidates;
  stats.measure_ms += absl::ToDoubleMilliseconds(absl::Now() - start);
  if (options.records != nullptr) {
    options.records->StoreRecord(record_key, kConvPlanRecordKind,
                                 EncodeConvPlanRecord(measured.record));
  }
  return std::move(measured.plan);
}

size_t ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// The plan's first run, ahead of the step's capture (WarmUpInThrowawayCapture), on the buffers
// the options name where they name all the plan reads and writes (nothing runs in the throwaway
// capture), else on one allocation as large as any operand or the workspace standing in for all.
absl::Status WarmUp(const CudnnHandle& handle, const Key& key, const CudnnConvGraph::Plan& plan,
                    const ConvGraphOptions& options, absl::string_view context) {
  const auto first_run = [&](const ConvGraphBuffers& b, void* workspace) {
    std::unordered_map<int64_t, void*> pack = Pack(key.fusion, b);
    (void)plan.graph->execute_plan_at_index(handle.get(), pack, workspace, plan.index);
  };
  if (MissingBuffers(key.fusion, options.measure_buffers).empty() &&
      (plan.workspace_bytes == 0 || options.measure_workspace != nullptr)) {
    return WarmUpInThrowawayCapture(
        handle, 0, [&](void*) { first_run(options.measure_buffers, options.measure_workspace); },
        context);
  }
  const ConvShape& s = key.shape;
  const int64_t largest =
      std::max({s.n * s.c * s.h * s.w, s.n * s.k * s.p * s.q, s.k * (s.c / s.groups) * s.r * s.s});
  const size_t bytes = std::max<size_t>(largest * ElementBytes(s.dtype), plan.workspace_bytes);
  return WarmUpInThrowawayCapture(
      handle, bytes,
      [&](void* placeholder) {
        first_run({.a = placeholder,
                   .b = placeholder,
                   .out = placeholder,
                   .acc = placeholder,
                   .scale = placeholder,
                   .bias = placeholder,
                   .sum = placeholder,
                   .sq_sum = placeholder},
                  placeholder);
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
  if (fusion.output_stats && kind != ConvKind::kForward) {
    return absl::UnimplementedError(absl::StrCat(context, ": the ", fusion.ToString(),
                                                 " fusion applies to forward convolutions, not ",
                                                 ConvKindName(kind)));
  }
  if (fusion.scale_bias_relu_input && kind == ConvKind::kBackwardData) {
    return absl::UnimplementedError(absl::StrCat(
        context,
        ": the input's scale-bias-ReLU prologue applies to forward convolutions and weight "
        "gradients, which read the input, not to ",
        ConvKindName(kind)));
  }
  if (fusion.add_to_output &&
      (kind != ConvKind::kBackwardData || fusion.scale_bias_relu_input || fusion.output_stats)) {
    return absl::UnimplementedError(absl::StrCat(
        context, ": accumulating into the output applies to data gradients alone, not ",
        ConvKindName(kind), " ", fusion.ToString()));
  }
  if (options.measure) {
    const std::string missing = MissingBuffers(fusion, options.measure_buffers);
    if (!missing.empty() || (options.workspace_limit > 0 && options.measure_workspace == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": measuring conv ", ConvKindName(kind), " plans needs ",
          missing.empty() ? "a workspace" : missing, " to run them on (", shape.ToString(), ")"));
    }
  }
  const Key key{kind,
                shape,
                fusion,
                shape.dtype == DType::kFloat32 && options.allow_tf32,
                options.deterministic,
                options.workspace_limit,
                options.device,
                options.measure};
  PlanCache& cache = PlanCache::Global();
  // Builds run under the lock: two lowerings of one shape build it once.
  absl::MutexLock lock(&cache.mu());
  auto& entries = cache.entries();
  auto it = entries.find(key);
  if (it == entries.end()) {
    Entry entry = Build(handle, key, options, cache.stats());
    if (entry.ok()) {
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(WarmUp(handle, key, **entry, options, context));
      Lap(start, cache.stats().warm_up_ms);
    }
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

ConvGraphStats ConvGraphStats::Since(const ConvGraphStats& before) const {
  return {.heuristic_plans = heuristic_plans - before.heuristic_plans,
          .measured_plans = measured_plans - before.measured_plans,
          .record_plans = record_plans - before.record_plans,
          .records_discarded = records_discarded - before.records_discarded,
          .candidates_timed = candidates_timed - before.candidates_timed,
          .measure_ms = measure_ms - before.measure_ms,
          .lower_ms = lower_ms - before.lower_ms,
          .build_ms = build_ms - before.build_ms,
          .warm_up_ms = warm_up_ms - before.warm_up_ms,
          .slowest_build = slowest_build,
          .slowest_build_ms = slowest_build_ms};
}

std::string ConvGraphStats::MeasuredSince(const ConvGraphStats& before) const {
  const ConvGraphStats d = Since(before);
  if (d.measured_plans + d.record_plans == 0) return "";
  return absl::StrFormat("cuDNN conv plans measured %d (%.0f ms), from records %d",
                         d.measured_plans, d.measure_ms, d.record_plans);
}

std::string ConvGraphStats::TimingSince(const ConvGraphStats& before) const {
  const ConvGraphStats d = Since(before);
  const int64_t plans = d.heuristic_plans + d.measured_plans + d.record_plans;
  if (plans == 0) return "";
  return absl::StrFormat(
      "cuDNN conv plans %d: lowering %.0f ms, builds %.0f (slowest %.0f: %s), first runs %.0f",
      plans, d.lower_ms, d.build_ms, d.slowest_build_ms, d.slowest_build, d.warm_up_ms);
}

void CudnnConvGraph::ForgetPlans() {
  PlanCache& cache = PlanCache::Global();
  absl::MutexLock lock(&cache.mu());
  cache.entries().clear();
}

ConvGraphStats CudnnConvGraph::Stats() {
  PlanCache& cache = PlanCache::Global();
  absl::MutexLock lock(&cache.mu());
  return cache.stats();
}

std::string CudnnConvGraph::Describe() const {
  return absl::StrCat("cudnn graph conv ", ConvKindName(kind_),
                      fusion_.any() ? absl::StrCat(" ", fusion_.ToString()) : "", " ",
                      plan_->engine, " ws ", plan_->workspace_bytes,
                      plan_->deterministic ? " deterministic" : "",
                      plan_->chosen_by.empty() ? "" : absl::StrCat(" ", plan_->chosen_by));
}

absl::Status CudnnConvGraph::Run(const CudnnHandle& handle, const ConvGraphBuffers& b,
                                 void* workspace, absl::string_view context) const {
  if (plan_->workspace_bytes > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", Describe(), " needs ",
                                                   plan_->workspace_bytes,
                                                   " bytes of workspace, got none"));
  }
  const std::string missing = MissingBuffers(fusion_, b);
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", Describe(), " needs ", missing));
  }
  std::unordered_map<int64_t, void*> pack = Pack(fusion_, b);
  if (fusion_.output_stats) {
    // The sums start from zero on every run, whether or not the engine adds into its outputs
    // (the frontend's own tests hand it zeroed ones): a memset node under capture.
    cudaStream_t stream = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudnnGetStream(handle.get(), &stream), "cudnnGetStream", context));
    const size_t bytes = static_cast<size_t>(shape_.k) * sizeof(float);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.sum, 0, bytes, stream), context);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.sq_sum, 0, bytes, stream), context);
  }
  return FrontendStatus(
      plan_->graph->execute_plan_at_index(handle.get(), pack, workspace, plan_->index), "execute",
      Describe(), context);
}

}  // namespace reprise::runtime
