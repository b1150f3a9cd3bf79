// JSON dumps of graphs and plans; docs/dump_schema.md is the schema. The Write*Members functions
// add members to an object the caller has opened, so that a later stage (the captured CUDA graph,
// capture/graph_dump.h) extends the plan's dump instead of repeating it.
#ifndef REPRISE_SRC_PASSES_DUMP_JSON_H_
#define REPRISE_SRC_PASSES_DUMP_JSON_H_

#include <string>

#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/plan.h"
#include "src/util/json_writer.h"

namespace reprise::passes {

// The value of the "schema" member; bumped when a member changes meaning or goes away.
inline constexpr char kDumpSchema[] = "reprise-dump/1";

std::string ForwardToJson(const Graph& graph, Value loss);  // Stage "ir"; `loss` may be invalid.
std::string TrainingToJson(const autodiff::TrainingGraph& training);  // Stage "training".
std::string PlanToJson(const Plan& plan);                             // Stage "plan".

// "schema", "stage", "parameter_count", "nodes", and "loss" when `loss` is valid.
void WriteGraphMembers(const Graph& graph, Value loss, absl::string_view stage,
                       util::JsonWriter& w);
// The graph members of the plan's graph, then "plan": launches, buffers, memory, fused groups.
void WritePlanMembers(const Plan& plan, absl::string_view stage, util::JsonWriter& w);

// {"node": id, "output": index, "name": node name}, on one line.
void WriteValue(const Graph& graph, Value v, util::JsonWriter& w);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_DUMP_JSON_H_
