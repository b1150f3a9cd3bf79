// Graphviz DOT of graphs and plans. Every node is a box labelled with its name, op and output
// shapes (leaves are ellipses); data edges carry the shape of the value they move, control edges
// are dashed. In a plan, the launches sit in one cluster per lane (cluster_lane0, ...), a fused
// node is filled orange and lists the nodes it replaced in its label and tooltip, and a launch's
// waits on other lanes are dotted blue edges.
#ifndef REPRISE_SRC_PASSES_DUMP_DOT_H_
#define REPRISE_SRC_PASSES_DUMP_DOT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "src/passes/plan.h"

namespace reprise::passes {

std::string GraphToDot(const Graph& graph);
std::string PlanToDot(const Plan& plan);

// `text` as a quoted DOT string: quotes and backslashes escaped, line breaks as \n.
std::string DotQuote(absl::string_view text);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_DUMP_DOT_H_
