// Dumps of a model at the host-side stages of compilation, for reprise-dump and for tests: the
// user's forward graph (stage ir), the training graph (stage training) and the plan, as text, JSON
// (schema: docs/dump_schema.md), Graphviz DOT, or SVG rendered by Graphviz's `dot`. None needs a
// GPU; the captured CUDA graph is dumped by capture/graph_dump.h.
//
//   ASSIGN_OR_RETURN(DumpFormat format, ParseDumpFormat("json"));
//   ASSIGN_OR_RETURN(std::string json, DumpPlan(plan, format));
#ifndef REPRISE_SRC_PASSES_PLAN_DUMP_H_
#define REPRISE_SRC_PASSES_PLAN_DUMP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/plan.h"

namespace reprise::passes {

enum class DumpFormat : uint8_t { kText, kJson, kDot, kSvg };

absl::string_view DumpFormatName(DumpFormat format);  // "text", "json", "dot", "svg"
// InvalidArgument naming the unknown format and the known ones.
absl::StatusOr<DumpFormat> ParseDumpFormat(absl::string_view name);
// OK when `format` can be written on this machine; FailedPrecondition for svg without Graphviz.
absl::Status CheckFormatAvailable(DumpFormat format);

// The names in a fused node's "fused_nodes" attribute (the nodes it replaced); empty for a node
// that fuses nothing.
std::vector<std::string> FusedNodeNames(const Node& node);

// The forward graph as the user built it; `loss` may be invalid (no loss named). Text is
// Graph::ToString().
absl::StatusOr<std::string> DumpForward(const Graph& graph, Value loss, DumpFormat format);
// The training graph: forward, backward and optimizer. Text is Graph::ToString().
absl::StatusOr<std::string> DumpTraining(const autodiff::TrainingGraph& training,
                                         DumpFormat format);
// The plan: launches in order with lanes, waits and fused groups, and the memory plan. Text is
// PlanToString().
absl::StatusOr<std::string> DumpPlan(const Plan& plan, DumpFormat format);

// `dot_text` itself for kDot, rendered by Graphviz for kSvg; InvalidArgument for other formats.
absl::StatusOr<std::string> FinishDot(std::string dot_text, DumpFormat format);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_PLAN_DUMP_H_
