// Views of large graph dumps that stay usable. Graphviz lays out a ResNet-50 training graph (about
// 2,000 nodes) for longer than anyone waits, so reprise-dump draws a graph above a node count as
// one box per block: nodes are grouped by the leading parts of their dotted names ("layer3.2.conv1"
// -> "layer3.2"), at the deepest level that fits, with one edge per pair of connected groups; the
// backward pass and the update are drawn apart from the forward nodes of the same block.
// --filter draws only the nodes whose names contain a text, in full. The HTML view is one
// self-contained file (no script fetched from anywhere) that lists every node by group, with a
// search box and links from each node to its inputs and consumers.
//
// All of them read the JSON dump (docs/dump_schema.md) of stage ir, training or plan.
//
//   ASSIGN_OR_RETURN(std::string json, DumpModel({... .format = "json"}));
//   ASSIGN_OR_RETURN(DotView view, DotFromDumpJson(json, {.max_nodes = 300}));
#ifndef REPRISE_SRC_TOOLS_DUMP_VIEW_H_
#define REPRISE_SRC_TOOLS_DUMP_VIEW_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::tools {

// A collapsed graph has at most this many boxes (or max_nodes, if fewer): with more, the edges
// between blocks cross so often that Graphviz takes minutes again (ResNet-50's plan at 289
// boxes ran past a minute; at 63 it takes seconds).
inline constexpr int64_t kMaxGroups = 80;

struct DotViewOptions {
  // Above this many nodes (after the filter) the graph is collapsed into groups; 0: never.
  int64_t max_nodes = 300;
  // When not empty, only nodes whose names contain it are drawn (the values they read from
  // outside the selection appear as small grey ellipses).
  std::string filter;
};

struct DotView {
  std::string dot;
  int64_t graph_nodes = 0;  // Nodes of the dumped graph.
  int64_t drawn_nodes = 0;  // Boxes in `dot` (groups when collapsed).
  int collapse_level = 0;   // 0: not collapsed; else the name parts that make a group's key.
  // How the view was made and how to get another, for the user; empty when every node is drawn.
  std::string note;
};

// DOT of the JSON dump `json`: every node when it has at most options.max_nodes (after the
// filter), else one box per group. InvalidArgument when the JSON is not a reprise-dump/1 graph,
// when the filter matches nothing, or when even one group per top-level name is too many (the
// message says which flags give a smaller view).
absl::StatusOr<DotView> DotFromDumpJson(absl::string_view json, const DotViewOptions& options);

// A self-contained HTML page showing the JSON dump `json` (any stage); `title` heads it.
absl::StatusOr<std::string> HtmlFromDumpJson(absl::string_view json, absl::string_view title);

// The group of a node called `name` at `level` (1 or more): its first `level` dot-separated
// parts, "layer3.2.conv1" -> "layer3" (1), "layer3.2" (2).
std::string GroupOf(absl::string_view name, int level);

}  // namespace reprise::tools

#endif  // REPRISE_SRC_TOOLS_DUMP_VIEW_H_
