#include "src/passes/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

absl::StatusOr<Plan> BuildPlan(autodiff::TrainingGraph training, absl::Span<const Value> fetch) {
  Plan plan;
  plan.training = std::move(training);
  plan.kept.push_back(plan.training.loss);
  for (const Value& v : fetch) {
    RETURN_IF_ERROR(plan.graph().SpecOf(v).status());
    plan.kept.push_back(v);
  }
  ASSIGN_OR_RETURN(plan.launches, Schedule(plan.graph()));
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
    absl::StrAppend(&out, "launch ", i + 1, ": lane ", plan.launches[i].lane, " ", n.name, " = ",
                    n.op_name(), " -> ", outs.empty() ? "(in place)" : absl::StrJoin(outs, ", "),
                    "\n");
  }
  absl::StrAppend(&out, "arena ", plan.memory.arena_bytes, " bytes; transient peak ",
                  plan.memory.transient_peak, " bytes\n");
  return out;
}

}  // namespace reprise::passes
