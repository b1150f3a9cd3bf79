// Trainer::Impl's report (the counters of stats(), the captured graph's nodes by kind and the
// reasons behind every re-capture and re-instantiation) and its out-of-memory Status.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "capture/graph_inspect.h"
#include "src/api/trainer_impl.h"
#include "src/api/trainer_report_format.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/runtime/cuda_status.h"

namespace reprise {
namespace {

std::vector<std::pair<std::string, int64_t>> Sorted(const std::map<std::string, int64_t>& counts) {
  return {counts.begin(), counts.end()};
}

// The nodes of `graph` by CUDA's kind; one "unreadable" entry if CUDA cannot say.
std::vector<std::pair<std::string, int64_t>> NodesByKind(cudaGraph_t graph, int64_t num_nodes) {
  size_t count = 0;
  std::vector<cudaGraphNode_t> nodes;
  cudaError_t error = cudaGraphGetNodes(graph, nullptr, &count);
  if (error == cudaSuccess) {
    nodes.resize(count);
    error = cudaGraphGetNodes(graph, nodes.data(), &count);
  }
  std::map<std::string, int64_t> kinds;
  for (size_t i = 0; error == cudaSuccess && i < count; ++i) {
    cudaGraphNodeType type;
    error = cudaGraphNodeGetType(nodes[i], &type);
    if (error == cudaSuccess) ++kinds[std::string(capture::CudaGraphNodeTypeName(type))];
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return {{absl::StrCat("unreadable (", cudaGetErrorName(error), ")"), num_nodes}};
  }
  return Sorted(kinds);
}

}  // namespace

TrainerReport Trainer::Impl::Report() const {
  TrainerReport report;
  report.stats = stats();
  if (workspaces_ != nullptr) report.workspace_per_lane = workspaces_->mapped_per_lane();
  if (captured_.has_value()) {
    report.graphs.push_back({"step", NodesByKind(captured_->graph().get(), captured_->num_nodes()),
                             captured_->replays()});
    report.instantiation_reasons = Sorted(captured_->instantiation_reasons());
  }
  report.recapture_reasons = Sorted(recapture_reasons_);
  absl::StatusOr<std::optional<TrainerReport::LossScaleState>> loss_scale = ReadLossScale();
  if (loss_scale.ok()) {
    report.loss_scale = *std::move(loss_scale);
  } else {  // Said, not dropped: the report is how the engine's state is seen.
    report.loss_scale = TrainerReport::LossScaleState{
        .mode = absl::StrCat("unreadable (", loss_scale.status().ToString(), ")")};
  }
  absl::StatusOr<std::optional<TrainerReport::NonFiniteState>> non_finite = ReadNonFinite();
  if (non_finite.ok()) {
    report.non_finite = *std::move(non_finite);
    if (report.non_finite.has_value()) {
      report.stats.skipped_steps = report.non_finite->skipped_steps;
    } else {
      report.stats.skipped_steps = 0;  // Nothing checks: nothing is skipped.
    }
  } else {
    report.non_finite = TrainerReport::NonFiniteState{
        .policy = std::string(NonFinitePolicyName(options_.numerics.non_finite.policy)),
        .checked_by = absl::StrCat("unreadable (", non_finite.status().ToString(), ")")};
  }
  return report;
}

void Trainer::Impl::PrintReportIfAsked() const {
  const char* asked = std::getenv("REPRISE_REPORT");
  if (asked == nullptr || std::string(asked) != "1") return;
  std::fputs(Report().ToText().c_str(), stderr);
}

absl::Status Trainer::Impl::OutOfMemory(absl::string_view what, int64_t bytes,
                                        const absl::Status& cause) const {
  size_t free_bytes = 0, total_bytes = 0;
  int64_t free_known = -1;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    free_known = static_cast<int64_t>(free_bytes);
  } else {
    (void)cudaGetLastError();
  }
  const std::string text = OutOfMemoryText(what, bytes, stats(), plan_.lanes(), free_known,
                                           static_cast<int64_t>(total_bytes));
  return absl::Status(cause.code() == absl::StatusCode::kResourceExhausted
                          ? cause.code()
                          : absl::StatusCode::kInternal,
                      absl::StrCat(text, " (", cause.message(), ")"));
}

TrainerReport Trainer::Report() const { return impl_->Report(); }

}  // namespace reprise
