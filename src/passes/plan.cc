#include "src/passes/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

int Plan::lanes() const {
  int count = 1;
  for (const ScheduledLaunch& launch : launches) count = std::max(count, launch.lane + 1);
  return count;
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

absl::StatusOr<Plan> BuildPlan(autodiff::TrainingGraph training, absl::Span<const Value> fetch,
                               const PlanOptions& options) {
  Plan plan;
  std::vector<Value> kept = {training.loss};
  for (const Value& v : fetch) {
    RETURN_IF_ERROR(training.graph.SpecOf(v).status());
    kept.push_back(v);
  }
  if (options.fuse) {
    ASSIGN_OR_RETURN(FusedTraining fused, Fuse(training, kept, options.fusion));
    plan.training = std::move(fused.training);
    plan.values = std::move(fused.values);
    plan.fused_groups = std::move(fused.groups);
  } else {
    plan.training = std::move(training);
  }
  for (const Value& v : kept) {
    ASSIGN_OR_RETURN(Value mapped, plan.MapValue(v));
    plan.kept.push_back(mapped);
  }
  ASSIGN_OR_RETURN(plan.launches, Schedule(plan.graph(), {.lanes = options.lanes}));
  ASSIGN_OR_RETURN(plan.memory, PlanMemory(plan.graph(), plan.launches, plan.kept));
  return plan;
}

std::string PlanToString(const Plan& plan) {
  const Graph& g = plan.graph();
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
    if (fused != n.attrs.end() && std::holds_alternative<std::string>(fused->second)) {
      absl::StrAppend(&out, "  [fuses ", std::get<std::string>(fused->second), "]");
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "arena ", plan.memory.arena_bytes, " bytes; transient peak ",
                  plan.memory.transient_peak, " bytes\n");
  return out;
}

}  // namespace reprise::passes
