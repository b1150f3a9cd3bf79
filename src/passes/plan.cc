#include "src/passes/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/ir/op_def.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

int Plan::lanes() const {
  int count = 1;
  for (const ScheduledLaunch& launch : launches) count = std::max(count, launch.lane + 1);
  return count;
}

int Plan::compute_lanes() const {
  for (const ScheduledLaunch& launch : launches) {
    if (graph().node(launch.node).op->kind == ir::OpKind::kCommunication) return lanes() - 1;
  }
  return lanes();
}

absl::StatusOr<Value> Plan::MapValue(Value user_value) const {
  if (values.empty()) {
    RETURN_IF_ERROR(graph().SpecOf(user_value).status());
    return user_value;
  }
  auto it = values.find(user_value);
  if (it == values.end()) {
    return absl::NotFoundError(absl::StrCat(
        "value ", user_value.output, " of node ", user_value.node,
        " is computed inside a fused kernel and not kept; name it in TrainOptions::fetch"));
  }
  return it->second;
}

namespace {

// Everything after mirroring: fuse, schedule and (if `place`) the memory plan.
absl::StatusOr<Plan> PlanMirrored(autodiff::TrainingGraph training, absl::Span<const Value> kept,
                                  const PlanOptions& options, bool place = true) {
  Plan plan;
  if (options.fuse) {
    ASSIGN_OR_RETURN(FusedTraining fused, Fuse(training, kept, options.fusion));
    plan.training = std::move(fused.training);
    plan.values = std::move(fused.values);
    plan.fused_groups = std::move(fused.groups);
    plan.whole_step_declined = std::move(fused.whole_step_declined);
  } else {
    plan.training = std::move(training);
  }
  for (const Value& v : kept) {
    ASSIGN_OR_RETURN(Value mapped, plan.MapValue(v));
    plan.kept.push_back(mapped);
  }
  ASSIGN_OR_RETURN(plan.launches, Schedule(plan.graph(), {.lanes = options.lanes}));
  if (place) {
    ASSIGN_OR_RETURN(plan.memory,
                     PlanMemory(plan.graph(), absl::MakeSpan(plan.launches), plan.kept));
  }
  return plan;
}

}  // namespace

absl::StatusOr<Plan> BuildPlan(autodiff::TrainingGraph training, absl::Span<const Value> fetch,
                               const PlanOptions& options) {
  std::vector<Value> kept = {training.loss};
  for (const Value& v : fetch) {
    RETURN_IF_ERROR(training.graph.SpecOf(v).status());
    kept.push_back(v);
  }
  MirrorReport report;
  ASSIGN_OR_RETURN(const int64_t floor, MirrorFloorBytes(training, kept));
  if (options.mirror.policy != MirrorOptions::Policy::kOff) {
    // Forward values keep their ids through mirroring, so `kept` holds for every candidate.
    auto peak = [&](const autodiff::TrainingGraph& candidate,
                    bool place) -> absl::StatusOr<PeakEstimate> {
      ASSIGN_OR_RETURN(Plan p, PlanMirrored(candidate, kept, options, place));
      ASSIGN_OR_RETURN(int64_t live, LiveTransientBytes(p.graph(), p.launches, p.kept));
      return PeakEstimate{live, place ? p.memory.transient_peak : -1};
    };
    ASSIGN_OR_RETURN(MirroredTraining mirrored, Mirror(training, kept, options.mirror, peak));
    training = std::move(mirrored.training);
    report = std::move(mirrored.report);
  }
  ASSIGN_OR_RETURN(Plan plan, PlanMirrored(std::move(training), kept, options));
  plan.activation_peak_unmirrored = options.mirror.policy == MirrorOptions::Policy::kOff
                                        ? plan.memory.transient_peak
                                        : report.peak_unmirrored;
  plan.mirror_floor = floor;
  plan.mirrored = std::move(report.mirrored);
  plan.mirror_evaluations = report.evaluations;
  return plan;
}

std::string PlanToString(const Plan& plan) {
  const Graph& g = plan.graph();
  absl::flat_hash_map<std::string, std::string> original_of;  // Twin -> the node it recomputes.
  for (const auto& [original, twin] : plan.mirrored) original_of[twin] = original;
  std::string out = absl::StrCat("launch 0: lane 0 copy_inputs ", plan.memory.input_bytes,
                                 " bytes -> @", plan.memory.input_offset, "\n");
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const Node& n = g.node(plan.launches[i].node);
    std::vector<std::string> outs;
    for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) {
      const Buffer* b = plan.memory.Find({n.id, o});
      outs.push_back(absl::StrCat(n.outputs[o].ToString(), "@", b ? b->offset : -1));
    }
    std::string waits;
    for (int w : plan.launches[i].waits)
      absl::StrAppend(&waits, waits.empty() ? " (waits " : ", ", w + 1);
    if (!waits.empty()) waits += ")";
    absl::StrAppend(&out, "launch ", i + 1, ": lane ", plan.launches[i].lane, waits, " ", n.name,
                    " = ", n.op_name(), " -> ",
                    outs.empty() ? "(in place)" : absl::StrJoin(outs, ", "));
    auto fused = n.attrs.find("fused_nodes");
    std::vector<std::string> members = {n.name};
    if (fused != n.attrs.end() && std::holds_alternative<std::string>(fused->second)) {
      absl::StrAppend(&out, "  [fuses ", std::get<std::string>(fused->second), "]");
      members = absl::StrSplit(std::get<std::string>(fused->second), ',');
    }
    std::vector<std::string> recomputed;
    for (const std::string& member : members) {
      if (auto it = original_of.find(member); it != original_of.end())
        recomputed.push_back(it->second);
    }
    if (!recomputed.empty())
      absl::StrAppend(&out, "  [mirror of ", absl::StrJoin(recomputed, ","), "]");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "arena ", plan.memory.arena_bytes, " bytes; transient peak ",
                  plan.memory.transient_peak, " bytes; ", plan.memory.reuse_waits,
                  " waits added to reuse what another lane read\n");
  if (!plan.whole_step_declined.empty()) {
    absl::StrAppend(&out, "whole step: not used: ", plan.whole_step_declined, "\n");
  }
  if (plan.mirror_evaluations > 0) {  // The mirror pass ran.
    absl::StrAppend(&out, "mirror: ", plan.mirrored.size(), " nodes recomputed; transient peak ",
                    plan.activation_peak_unmirrored, " bytes without mirroring; ",
                    plan.mirror_floor, " bytes read by the backward pass cannot be recomputed\n");
  }
  return out;
}

}  // namespace reprise::passes
