// TrainerReport's text and JSON forms. Host-only, so the formats are tested on the CPU.
#include "src/api/trainer_report_format.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/util/json_writer.h"

namespace reprise {
namespace {

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string Counts(const std::vector<std::pair<std::string, int64_t>>& counts) {
  std::vector<std::string> parts;
  for (const auto& [what, n] : counts) parts.push_back(absl::StrCat(what, " ", n));
  return absl::StrJoin(parts, ", ");
}

void WriteCounts(util::JsonWriter& w, absl::string_view key,
                 const std::vector<std::pair<std::string, int64_t>>& counts) {
  w.Key(key).BeginObject(util::JsonWriter::kInline);
  for (const auto& [what, n] : counts) w.Key(what).Int(n);
  w.EndObject();
}

}  // namespace

std::string OutOfMemoryText(absl::string_view what, int64_t bytes, const TrainerStats& s, int lanes,
                            int64_t free_bytes, int64_t total_bytes) {
  const auto mib = [](int64_t b) { return absl::StrFormat("%.2f MiB", MiB(b)); };
  return absl::StrCat(
      "Trainer::Create could not allocate ", what, ": ", bytes, " bytes (", mib(bytes),
      ") asked for; arena ", mib(s.arena_bytes), " = parameters ", mib(s.parameter_bytes),
      ", optimizer state ", mib(s.optimizer_state_bytes), ", parameter copies ",
      mib(s.parameter_copy_bytes), ", constants ", mib(s.constant_bytes), ", inputs ",
      mib(s.input_bytes), ", kept ", mib(s.fetched_bytes), ", activation peak ",
      mib(s.activation_peak_bytes), " (gradients ", mib(s.gradient_bytes),
      " of it); workspaces for ", lanes, " lane(s); ",
      free_bytes >= 0
          ? absl::StrCat("free device memory ", mib(free_bytes), " of ", mib(total_bytes))
          : std::string("free device memory unknown"));
}

std::string TrainerReport::ToText() const {
  const TrainerStats& s = stats;
  std::string text = "reprise step report\n";
  absl::StrAppendFormat(&text, "  steps %d; host time per Step(): mean %.1f us, median %.1f us\n",
                        s.steps, s.host_step_us_mean, s.host_step_us_median);
  if (graphs.empty()) {
    absl::StrAppend(&text, "  no captured graph: the step runs eagerly, ", s.launches_per_step,
                    " launches on ", s.lanes, " lane(s)\n");
  }
  for (const CapturedGraph& g : graphs) {
    int64_t nodes = 0;
    for (const auto& [kind, n] : g.nodes_by_kind) nodes += n;
    absl::StrAppend(&text, "  graph '", g.name, "': ", nodes, " nodes (", Counts(g.nodes_by_kind),
                    "), replays ", g.replays, "; ", s.launches_per_step, " launches on ", s.lanes,
                    " lane(s)\n");
  }
  absl::StrAppendFormat(&text,
                        "  captures %d (re-captures %d), exec updates in place %d, "
                        "instantiations %d (re-instantiations %d), binding node updates %d\n",
                        s.graph_captures, std::max<int64_t>(0, s.graph_captures - 1),
                        s.graph_exec_updates, s.graph_instantiations,
                        std::max<int64_t>(0, s.graph_instantiations - 1), s.graph_node_updates);
  if (!graphs.empty()) {
    std::string launch = s.device_graph_launch
                             ? absl::StrCat("device (uploads ", s.graph_uploads, ")")
                             : std::string("host");
    if (!s.host_launch_reason.empty()) absl::StrAppend(&launch, " (", s.host_launch_reason, ")");
    absl::StrAppend(&text, "  launched from the ", launch, "\n");
    if (!s.graph_launch_measurement.empty() && s.device_graph_launch) {
      absl::StrAppend(&text, "    launch ", s.graph_launch_measurement, "\n");
    }
  }
  if (!recapture_reasons.empty()) {
    absl::StrAppend(&text, "    re-captured because: ", Counts(recapture_reasons), "\n");
  }
  if (!instantiation_reasons.empty()) {
    absl::StrAppend(&text, "    re-instantiated because: ", Counts(instantiation_reasons), "\n");
  }
  absl::StrAppendFormat(&text,
                        "  kernels: compiled %d (%.0f ms), memory hits %d, disk hits %d, corrupt "
                        "disk entries %d; %.1f ms to acquire at Create\n",
                        s.kernels_compiled, s.kernel_compile_ms, s.kernel_cache_hits,
                        s.kernel_disk_hits, s.kernel_cache_corrupt, s.kernel_acquire_ms);
  if (BuiltConvPlans(s)) {
    absl::StrAppendFormat(&text,
                          "  convolution plans (cuDNN graph API): heuristic %d, measured %d (%d "
                          "candidates timed, %.0f ms), from records %d, records discarded %d; "
                          "lowering %.0f ms, builds %.0f, first runs %.0f\n",
                          s.conv_plans_heuristic, s.conv_plans_measured, s.conv_candidates_timed,
                          s.conv_measure_ms, s.conv_plans_from_records,
                          s.conv_plan_records_discarded, s.conv_plan_lower_ms, s.conv_plan_build_ms,
                          s.conv_plan_warm_up_ms);
  }
  if (MeasuredLegacyConvs(s)) {
    absl::StrAppendFormat(&text,
                          "  convolution algorithms (cuDNN legacy calls): measured %d (%.0f ms), "
                          "from records %d, records discarded %d\n",
                          s.conv_legacy_measured, s.conv_legacy_measure_ms,
                          s.conv_legacy_from_records, s.conv_legacy_records_discarded);
  }
  if (MeasuredMatmulChoices(s)) {
    absl::StrAppendFormat(&text,
                          "  cuBLASLt choices: measured %d (%d candidates timed, %.0f ms), from "
                          "records %d, records discarded %d\n",
                          s.matmul_choices_measured, s.matmul_candidates_timed, s.matmul_measure_ms,
                          s.matmul_choices_from_records, s.matmul_records_discarded);
  }
  if (!s.create_ms.empty()) absl::StrAppend(&text, "  ", s.CreateBreakdown(), "\n");
  absl::StrAppendFormat(
      &text,
      "  memory: arena %.2f MiB = parameters %.2f + optimizer state %.2f + parameter copies %.2f + "
      "constants %.2f + "
      "inputs %.2f + kept %.2f + activation peak %.2f (gradients %.2f of it; %.2f unmirrored, %d "
      "nodes mirrored, %.2f no mirroring frees)\n",
      MiB(s.arena_bytes), MiB(s.parameter_bytes), MiB(s.optimizer_state_bytes),
      MiB(s.parameter_copy_bytes), MiB(s.constant_bytes), MiB(s.input_bytes), MiB(s.fetched_bytes),
      MiB(s.activation_peak_bytes), MiB(s.gradient_bytes), MiB(s.activation_peak_unmirrored_bytes),
      s.mirrored_nodes, MiB(s.mirror_floor_bytes));
  std::vector<std::string> lanes;
  for (int64_t b : workspace_per_lane) lanes.push_back(absl::StrFormat("%.2f", MiB(b)));
  absl::StrAppendFormat(&text, "          workspaces %.2f MiB (lanes: %s), tickets %.0f KiB; ",
                        MiB(s.workspace_bytes), absl::StrJoin(lanes, " + "),
                        s.lane_ticket_bytes / 1024.0);
  if (s.library_handle_bytes >= 0) {
    absl::StrAppendFormat(&text, "library handles %.2f MiB\n", MiB(s.library_handle_bytes));
  } else {
    absl::StrAppend(&text, "library handles not measured\n");
  }
  if (loss_scale.has_value()) {
    absl::StrAppendFormat(&text,
                          "  loss scaling %s: scale %g, %d clean steps since it changed, %d "
                          "steps skipped\n",
                          loss_scale->mode, loss_scale->scale, loss_scale->growth_tracker,
                          loss_scale->skipped_steps);
  }
  if (non_finite.has_value()) {
    // Why steps were skipped: a non-finite loss or gradient, found by whom.
    absl::StrAppend(
        &text, "  non-finite guard ", non_finite->policy, ": ", non_finite->skipped_steps,
        " steps skipped for an inf or a NaN in the loss or gradients, by ", non_finite->checked_by);
    if (non_finite->steps_checked >= 0) {
      absl::StrAppend(&text, "; ", non_finite->steps_checked, " steps checked");
    }
    if (non_finite->first_non_finite_step >= 0) {
      absl::StrAppend(&text, "; first at step ", non_finite->first_non_finite_step);
    }
    absl::StrAppend(&text, "\n");
    if (!non_finite->stop.empty()) absl::StrAppend(&text, "  stopped: ", non_finite->stop, "\n");
  } else {
    absl::StrAppend(&text, "  non-finite guard ", s.non_finite_policy, ": nothing checked\n");
  }
  if (!s.whole_step_declined.empty()) {
    absl::StrAppend(&text, "  whole step not used: ", s.whole_step_declined, "\n");
  }
  absl::StrAppend(&text, "  verify runs ", s.verify_runs, "\n");
  return text;
}

std::string TrainerReport::ToJson() const {
  const TrainerStats& s = stats;
  util::JsonWriter w;
  w.BeginObject();
  w.Key("steps").Int(s.steps);
  w.Key("host_step_us").BeginObject(util::JsonWriter::kInline);
  w.Key("mean").Double(s.host_step_us_mean).Key("median").Double(s.host_step_us_median);
  w.EndObject();
  w.Key("graphs").BeginArray();
  for (const CapturedGraph& g : graphs) {
    w.BeginObject(util::JsonWriter::kInline);
    w.Key("name").String(g.name);
    WriteCounts(w, "nodes_by_kind", g.nodes_by_kind);
    w.Key("replays").Int(g.replays);
    w.EndObject();
  }
  w.EndArray();
  w.Key("launches_per_step").Int(s.launches_per_step);
  w.Key("lanes").Int(s.lanes);
  w.Key("captures").Int(s.graph_captures);
  w.Key("recaptures").Int(std::max<int64_t>(0, s.graph_captures - 1));
  w.Key("exec_updates").Int(s.graph_exec_updates);
  w.Key("instantiations").Int(s.graph_instantiations);
  w.Key("reinstantiations").Int(std::max<int64_t>(0, s.graph_instantiations - 1));
  w.Key("node_updates").Int(s.graph_node_updates);
  w.Key("device_graph_launch").Bool(s.device_graph_launch);
  w.Key("graph_uploads").Int(s.graph_uploads);
  w.Key("host_launch_reason").String(s.host_launch_reason);
  w.Key("graph_launch_measuring").Bool(s.graph_launch_measuring);
  w.Key("graph_launch_measurement").String(s.graph_launch_measurement);
  WriteCounts(w, "recapture_reasons", recapture_reasons);
  WriteCounts(w, "instantiation_reasons", instantiation_reasons);
  w.Key("kernels").BeginObject(util::JsonWriter::kInline);
  w.Key("compiled").Int(s.kernels_compiled);
  w.Key("compile_ms").Double(s.kernel_compile_ms);
  w.Key("memory_hits").Int(s.kernel_cache_hits);
  w.Key("disk_hits").Int(s.kernel_disk_hits);
  w.Key("corrupt_discarded").Int(s.kernel_cache_corrupt);
  w.Key("acquire_ms").Double(s.kernel_acquire_ms);
  w.EndObject();
  w.Key("conv_plans").BeginObject(util::JsonWriter::kInline);
  w.Key("heuristic").Int(s.conv_plans_heuristic);
  w.Key("measured").Int(s.conv_plans_measured);
  w.Key("from_records").Int(s.conv_plans_from_records);
  w.Key("records_discarded").Int(s.conv_plan_records_discarded);
  w.Key("candidates_timed").Int(s.conv_candidates_timed);
  w.Key("measure_ms").Double(s.conv_measure_ms);
  w.Key("lower_ms").Double(s.conv_plan_lower_ms);
  w.Key("build_ms").Double(s.conv_plan_build_ms);
  w.Key("warm_up_ms").Double(s.conv_plan_warm_up_ms);
  w.EndObject();
  w.Key("conv_legacy_algorithms").BeginObject(util::JsonWriter::kInline);
  w.Key("measured").Int(s.conv_legacy_measured);
  w.Key("from_records").Int(s.conv_legacy_from_records);
  w.Key("records_discarded").Int(s.conv_legacy_records_discarded);
  w.Key("measure_ms").Double(s.conv_legacy_measure_ms);
  w.EndObject();
  w.Key("matmul_choices").BeginObject(util::JsonWriter::kInline);
  w.Key("measured").Int(s.matmul_choices_measured);
  w.Key("from_records").Int(s.matmul_choices_from_records);
  w.Key("records_discarded").Int(s.matmul_records_discarded);
  w.Key("candidates_timed").Int(s.matmul_candidates_timed);
  w.Key("measure_ms").Double(s.matmul_measure_ms);
  w.EndObject();
  w.Key("create_ms").BeginObject(util::JsonWriter::kInline);
  w.Key("total").Double(s.create_total_ms);
  for (const auto& [phase, ms] : s.create_ms) w.Key(phase).Double(ms);
  w.EndObject();
  w.Key("memory_bytes").BeginObject(util::JsonWriter::kInline);
  w.Key("arena").Int(s.arena_bytes);
  w.Key("parameters").Int(s.parameter_bytes);
  w.Key("optimizer_state").Int(s.optimizer_state_bytes);
  w.Key("parameter_copies").Int(s.parameter_copy_bytes);
  w.Key("constants").Int(s.constant_bytes);
  w.Key("inputs").Int(s.input_bytes);
  w.Key("kept").Int(s.fetched_bytes);
  w.Key("activation_peak").Int(s.activation_peak_bytes);
  w.Key("activation_peak_unmirrored").Int(s.activation_peak_unmirrored_bytes);
  w.Key("mirror_floor").Int(s.mirror_floor_bytes);
  w.Key("gradients").Int(s.gradient_bytes);
  w.Key("workspaces").Int(s.workspace_bytes);
  w.Key("workspace_per_lane").BeginArray(util::JsonWriter::kInline);
  for (int64_t b : workspace_per_lane) w.Int(b);
  w.EndArray();
  w.Key("lane_tickets").Int(s.lane_ticket_bytes);
  if (s.library_handle_bytes >= 0) {
    w.Key("library_handles").Int(s.library_handle_bytes);
  } else {
    w.Key("library_handles").Null();
  }
  w.EndObject();
  w.Key("mirrored_nodes").Int(s.mirrored_nodes);
  w.Key("verify_runs").Int(s.verify_runs);
  if (loss_scale.has_value()) {
    w.Key("loss_scale").BeginObject(util::JsonWriter::kInline);
    w.Key("mode").String(loss_scale->mode);
    w.Key("scale").Double(loss_scale->scale);
    w.Key("growth_tracker").Int(loss_scale->growth_tracker);
    w.Key("skipped_steps").Int(loss_scale->skipped_steps);
    w.EndObject();
  } else {
    w.Key("loss_scale").Null();
  }
  w.Key("non_finite_policy").String(s.non_finite_policy);
  w.Key("skipped_steps").Int(s.skipped_steps);
  if (non_finite.has_value()) {
    w.Key("non_finite").BeginObject(util::JsonWriter::kInline);
    w.Key("policy").String(non_finite->policy);
    w.Key("checked_by").String(non_finite->checked_by);
    w.Key("skipped_steps").Int(non_finite->skipped_steps);
    w.Key("steps_checked").Int(non_finite->steps_checked);
    w.Key("first_non_finite_step").Int(non_finite->first_non_finite_step);
    w.Key("stop").String(non_finite->stop);
    w.EndObject();
  } else {
    w.Key("non_finite").Null();
  }
  w.Key("whole_step_declined").String(s.whole_step_declined);
  w.EndObject();
  return std::move(w).str();
}

}  // namespace reprise
