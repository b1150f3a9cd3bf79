// Trainer::Impl::stats(): the counters that make the engine's behaviour visible, and their one-line
// form (TrainerStats::ToString).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/api/trainer_impl.h"
#include "src/api/trainer_report_format.h"
#include "src/autodiff/non_finite_guard.h"

namespace reprise {

TrainerStats Trainer::Impl::stats() const {
  TrainerStats s;
  s.steps = steps_;
  s.non_finite_policy = std::string(NonFinitePolicyName(options_.numerics.non_finite.policy));
  s.whole_step_declined = plan_.whole_step_declined;
  if (captured_.has_value()) {
    s.graph_replays = captured_->replays();
    s.graph_captures = captured_->captures();
    s.graph_instantiations = captured_->instantiations();
    s.graph_exec_updates = captured_->exec_updates();
    s.graph_node_updates = captured_->node_updates();
    s.graph_nodes = captured_->num_nodes();
    s.graph_uploads = captured_->uploads();
    s.device_graph_launch = captured_->launch() == capture::CapturedStep::Launch::kDevice;
    s.host_launch_reason =
        host_launch_reason_.empty() ? captured_->host_launch_reason() : host_launch_reason_;
    s.graph_launch_measuring = captured_->launch_measuring();
    s.graph_launch_measurement = captured_->launch_measurement();
  }
  s.launches_per_step = static_cast<int64_t>(launches_.size());
  s.lanes = lanes_.has_value() ? lanes_->count() : 1;
  s.arena_bytes = plan_.memory.arena_bytes;
  auto bytes = [&](passes::BufferClass c) {
    auto it = plan_.memory.bytes_by_class.find(c);
    return it == plan_.memory.bytes_by_class.end() ? int64_t{0} : it->second;
  };
  s.parameter_bytes = bytes(passes::BufferClass::kParameter);
  s.optimizer_state_bytes = bytes(passes::BufferClass::kOptimizerState);
  s.parameter_copy_bytes = bytes(passes::BufferClass::kParameterCopy);
  s.activation_peak_bytes = plan_.memory.transient_peak;
  s.activation_peak_unmirrored_bytes = plan_.activation_peak_unmirrored;
  s.mirror_floor_bytes = plan_.mirror_floor;
  s.mirrored_nodes = static_cast<int64_t>(plan_.mirrored.size());
  s.workspace_bytes = workspaces_ != nullptr ? workspaces_->mapped_bytes() : 0;
  s.lane_ticket_bytes = workspaces_ != nullptr ? workspaces_->ticket_bytes() : 0;
  // What this trainer's creation asked of the process-wide store.
  const runtime::KernelStore::Stats& before = kernel_stats_at_create_;
  const runtime::KernelStore::Stats& after = kernel_stats_after_create_;
  s.kernels_compiled = after.compiles - before.compiles;
  s.kernel_cache_hits = after.memory_hits - before.memory_hits;
  s.kernel_compile_ms = after.compile_ms - before.compile_ms;
  s.kernel_disk_hits = after.lower_hits - before.lower_hits;
  s.kernel_cache_corrupt = after.corrupt_discarded - before.corrupt_discarded;
  s.kernel_acquire_ms = kernel_acquire_ms_;
  s.conv_plans_heuristic = conv_plans_built_.heuristic_plans;
  s.conv_plans_measured = conv_plans_built_.measured_plans;
  s.conv_plans_from_records = conv_plans_built_.record_plans;
  s.conv_plan_records_discarded = conv_plans_built_.records_discarded;
  s.conv_candidates_timed = conv_plans_built_.candidates_timed;
  s.conv_measure_ms = conv_plans_built_.measure_ms;
  s.conv_plan_lower_ms = conv_plans_built_.lower_ms;
  s.conv_plan_build_ms = conv_plans_built_.build_ms;
  s.conv_plan_warm_up_ms = conv_plans_built_.warm_up_ms;
  s.conv_legacy_measured = conv_legacy_built_.measured;
  s.conv_legacy_from_records = conv_legacy_built_.from_records;
  s.conv_legacy_records_discarded = conv_legacy_built_.records_discarded;
  s.conv_legacy_measure_ms = conv_legacy_built_.measure_ms;
  s.matmul_choices_measured = matmul_choices_.measured;
  s.matmul_choices_from_records = matmul_choices_.from_records;
  s.matmul_records_discarded = matmul_choices_.records_discarded;
  s.matmul_candidates_timed = matmul_choices_.candidates_timed;
  s.matmul_measure_ms = matmul_choices_.measure_ms;
  s.create_ms = create_phases_.phases();
  s.create_total_ms = create_phases_.total_ms();
  s.input_bytes = bytes(passes::BufferClass::kInput);
  s.constant_bytes = bytes(passes::BufferClass::kConstant);
  s.fetched_bytes = bytes(passes::BufferClass::kFetched);
  for (const auto& [param, gradient] : plan_.training.gradients) {
    if (const passes::Buffer* b = plan_.memory.Find(gradient); b != nullptr) {
      s.gradient_bytes += b->bytes;
    }
  }
  s.library_handle_bytes = library_handle_bytes_;
  s.host_step_us_mean = step_host_us_.mean();
  s.host_step_us_median = step_host_us_.median();
  s.verify_runs = verify_runs_;
  return s;
}

std::string TrainerStats::ToString() const {
  return absl::StrFormat(
             "steps %d | graph: captures %d, instantiations %d, exec updates %d, node updates %d, "
             "replays %d, nodes %d | launches/step %d "
             "on %d lane(s) | "
             "arena %.2f MiB (parameters %.2f, optimizer state %.2f, activation peak %.2f; %.2f "
             "unmirrored, %d nodes mirrored), workspace "
             "%.2f MiB | kernels: %.1f ms to acquire, compiled %d (%.0f ms), memory hits %d, disk "
             "hits "
             "%d, "
             "corrupt entries discarded %d",
             steps, graph_captures, graph_instantiations, graph_exec_updates, graph_node_updates,
             graph_replays, graph_nodes, launches_per_step, lanes, arena_bytes / 1048576.0,
             parameter_bytes / 1048576.0, optimizer_state_bytes / 1048576.0,
             activation_peak_bytes / 1048576.0, activation_peak_unmirrored_bytes / 1048576.0,
             mirrored_nodes, workspace_bytes / 1048576.0, kernel_acquire_ms, kernels_compiled,
             kernel_compile_ms, kernel_cache_hits, kernel_disk_hits, kernel_cache_corrupt) +
         (BuiltConvPlans(*this)
              ? absl::StrFormat(" | conv plans: heuristic %d, measured %d, from records %d, "
                                "records discarded %d",
                                conv_plans_heuristic, conv_plans_measured, conv_plans_from_records,
                                conv_plan_records_discarded)
              : std::string()) +
         (MeasuredLegacyConvs(*this)
              ? absl::StrFormat(" | legacy conv algorithms: measured %d, from records %d, "
                                "records discarded %d",
                                conv_legacy_measured, conv_legacy_from_records,
                                conv_legacy_records_discarded)
              : std::string()) +
         (MeasuredMatmulChoices(*this)
              ? absl::StrFormat(" | cuBLASLt choices: measured %d, from records %d, records "
                                "discarded %d",
                                matmul_choices_measured, matmul_choices_from_records,
                                matmul_records_discarded)
              : std::string()) +
         absl::StrCat(" | non-finite guard ", non_finite_policy,
                      skipped_steps >= 0 ? absl::StrCat(", ", skipped_steps, " steps skipped") : "",
                      create_ms.empty() ? "" : absl::StrCat(" | ", CreateBreakdown()));
}

std::string TrainerStats::CreateBreakdown() const {
  std::vector<std::pair<std::string, double>> phases = create_ms;
  std::stable_sort(phases.begin(), phases.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  for (const auto& [name, ms] : phases) {
    if (ms >= 0.5) parts.push_back(absl::StrFormat("%s %.0f", name, ms));
  }
  return absl::StrFormat("Create %.0f ms: %s", create_total_ms, absl::StrJoin(parts, ", "));
}

}  // namespace reprise
