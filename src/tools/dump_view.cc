#include "src/tools/dump_view.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "src/passes/dump_dot.h"
#include "src/tools/dump_view_html.h"
#include "src/util/json_value.h"
#include "src/util/status_macros.h"

namespace reprise::tools {
namespace {

using util::JsonValue;

struct Node {
  std::string name, op, shape;
  std::vector<int64_t> inputs, control_inputs;
  // Computed from the loss (the backward pass and the update): drawn apart from the forward
  // nodes of the same block, which keeps the collapsed graph free of cycles that make Graphviz
  // slow (a block's forward feeds the loss, whose gradient flows back into the block).
  bool backward = false;
};

bool IsLeaf(const std::string& op) {
  return op == "input" || op == "parameter" || op == "state" || op == "constant";
}

// Marks every node that is neither a leaf nor on the way to the loss: the backward pass and the
// update (they start from the loss's seed gradient, a constant, not from the loss node itself).
// Nothing is marked when the dump names no loss.
void MarkBackward(const JsonValue& root, std::vector<Node>& nodes) {
  const JsonValue* loss = root.Find("loss");
  const JsonValue* id = loss == nullptr ? nullptr : loss->Find("node");
  if (id == nullptr || !id->is_integer() || id->integer() < 0 ||
      id->integer() >= static_cast<int64_t>(nodes.size())) {
    return;
  }
  std::vector<bool> forward(nodes.size(), false);
  std::vector<int64_t> stack = {id->integer()};
  while (!stack.empty()) {
    const int64_t n = stack.back();
    stack.pop_back();
    if (forward[n]) continue;
    forward[n] = true;
    for (int64_t in : nodes[n].inputs) stack.push_back(in);
    for (int64_t in : nodes[n].control_inputs) stack.push_back(in);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].backward = !forward[i] && !IsLeaf(nodes[i].op);
  }
}

// The box a node is drawn in when collapsed at `level`.
std::string GroupKey(const Node& node, int level) {
  std::string key = GroupOf(node.name, level);
  if (node.backward) key += " (backward)";
  return key;
}

absl::Status NotADump(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not a reprise-dump/1 graph: ", why));
}

// "[32, 64]" of the node's first output, "" when it has none.
std::string ShapeOf(const JsonValue& node) {
  const JsonValue* outputs = node.Find("outputs");
  if (outputs == nullptr || !outputs->is_array() || outputs->elements().empty()) return "";
  const JsonValue* shape = outputs->elements()[0].Find("shape");
  if (shape == nullptr || !shape->is_array()) return "";
  std::vector<int64_t> dims;
  for (const JsonValue& d : shape->elements()) dims.push_back(d.integer());
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<std::vector<Node>> ReadNodes(const JsonValue& root) {
  const JsonValue* schema = root.Find("schema");
  if (schema == nullptr || !schema->is_string() || schema->string() != "reprise-dump/1") {
    return NotADump("no \"schema\": \"reprise-dump/1\"");
  }
  const JsonValue* nodes = root.Find("nodes");
  if (nodes == nullptr || !nodes->is_array()) return NotADump("no \"nodes\" array");
  std::vector<Node> out;
  const int64_t count = static_cast<int64_t>(nodes->elements().size());
  for (const JsonValue& json : nodes->elements()) {
    const JsonValue* name = json.Find("name");
    const JsonValue* op = json.Find("op");
    if (name == nullptr || !name->is_string() || op == nullptr || !op->is_string()) {
      return NotADump(absl::StrCat("node ", out.size(), " has no name or op"));
    }
    Node node{name->string(), op->string(), ShapeOf(json), {}, {}};
    const auto read_ids = [&](const char* key, bool values,
                              std::vector<int64_t>& ids) -> absl::Status {
      const JsonValue* list = json.Find(key);
      if (list == nullptr || !list->is_array()) return absl::OkStatus();
      for (const JsonValue& e : list->elements()) {
        const JsonValue* id = values ? e.Find("node") : &e;
        if (id == nullptr || !id->is_integer() || id->integer() < 0 || id->integer() >= count) {
          return NotADump(absl::StrCat("node '", node.name, "' has a bad ", key, " entry"));
        }
        ids.push_back(id->integer());
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(read_ids("inputs", true, node.inputs));
    RETURN_IF_ERROR(read_ids("control_inputs", false, node.control_inputs));
    out.push_back(std::move(node));
  }
  return out;
}

// Every node, or those matched by `filter` and (as grey ellipses) the nodes they read from.
std::string FullDot(const std::vector<Node>& nodes, const std::vector<bool>& selected,
                    int64_t& drawn) {
  std::string dot = "digraph reprise {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  std::vector<bool> boundary(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!selected[i]) continue;
    for (int64_t in : nodes[i].inputs) boundary[in] = !selected[in];
    for (int64_t in : nodes[i].control_inputs) boundary[in] = !selected[in];
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (selected[i]) {
      ++drawn;
      absl::StrAppend(&dot, "  n", i,
                      " [label=", passes::DotQuote(absl::StrCat(n.name, "\n", n.op, "\n", n.shape)),
                      IsLeaf(n.op) ? ", shape=ellipse" : "", "];\n");
    } else if (boundary[i]) {
      absl::StrAppend(&dot, "  n", i, " [label=", passes::DotQuote(n.name),
                      ", shape=ellipse, style=dashed, color=grey, fontcolor=grey];\n");
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!selected[i]) continue;
    for (int64_t in : nodes[i].inputs) absl::StrAppend(&dot, "  n", in, " -> n", i, ";\n");
    for (int64_t in : nodes[i].control_inputs) {
      absl::StrAppend(&dot, "  n", in, " -> n", i, " [style=dashed];\n");
    }
  }
  dot += "}\n";
  return dot;
}

// One box per group of selected nodes at `level`, edges labelled with how many values cross.
std::string CollapsedDot(const std::vector<Node>& nodes, const std::vector<bool>& selected,
                         int level, int64_t& drawn) {
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (selected[i]) groups[GroupKey(nodes[i], level)].push_back(i);
  }
  absl::flat_hash_map<std::string, int> index;
  std::string dot =
      "digraph reprise {\n  rankdir=TB;\n  node [shape=box, style=rounded, fontsize=10];\n";
  for (const auto& [group, members] : groups) {
    const int id = static_cast<int>(index.size());
    index[group] = id;
    std::map<std::string, int> ops;
    for (size_t i : members) {
      if (!IsLeaf(nodes[i].op)) ++ops[nodes[i].op];
    }
    std::vector<std::pair<int, std::string>> by_count;
    for (const auto& [op, n] : ops) by_count.emplace_back(-n, op);
    std::sort(by_count.begin(), by_count.end());
    std::vector<std::string> top;
    for (size_t k = 0; k < by_count.size() && k < 3; ++k) {
      top.push_back(absl::StrCat(by_count[k].second, " x", -by_count[k].first));
    }
    if (by_count.size() > 3) top.push_back("...");
    absl::StrAppend(&dot, "  g", id, " [label=",
                    passes::DotQuote(absl::StrCat(group, "\n", members.size(), " nodes\n",
                                                  absl::StrJoin(top, ", "))),
                    "];\n");
  }
  drawn = static_cast<int64_t>(groups.size());
  std::map<std::pair<int, int>, int> edges;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!selected[i]) continue;
    const int to = index[GroupKey(nodes[i], level)];
    for (int64_t in : nodes[i].inputs) {
      if (!selected[in]) continue;
      const int from = index[GroupKey(nodes[in], level)];
      if (from != to) ++edges[{from, to}];
    }
  }
  for (const auto& [edge, count] : edges) {
    absl::StrAppend(&dot, "  g", edge.first, " -> g", edge.second,
                    count > 1 ? absl::StrCat(" [label=\"", count, "\"]") : "", ";\n");
  }
  dot += "}\n";
  return dot;
}

}  // namespace

std::string GroupOf(absl::string_view name, int level) {
  int dots = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '.' && ++dots == level) return std::string(name.substr(0, i));
  }
  return std::string(name);
}

absl::StatusOr<DotView> DotFromDumpJson(absl::string_view json, const DotViewOptions& options) {
  ASSIGN_OR_RETURN(const JsonValue root, util::ParseJson(json));
  ASSIGN_OR_RETURN(std::vector<Node> nodes, ReadNodes(root));
  MarkBackward(root, nodes);
  DotView view;
  view.graph_nodes = static_cast<int64_t>(nodes.size());
  std::vector<bool> selected(nodes.size(), true);
  int64_t count = view.graph_nodes;
  if (!options.filter.empty()) {
    count = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      selected[i] = nodes[i].name.find(options.filter) != std::string::npos;
      count += selected[i];
    }
    if (count == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--filter '", options.filter, "' matches none of the ", nodes.size(),
                       " node names (a block's name is a prefix such as layer3.2, fc0 or conv1)"));
    }
  }
  if (options.max_nodes <= 0 || count <= options.max_nodes) {
    view.dot = FullDot(nodes, selected, view.drawn_nodes);
    return view;
  }
  // The deepest grouping that fits: groups only grow in number with the level.
  int max_level = 1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (selected[i]) {
      max_level =
          std::max<int>(max_level, std::count(nodes[i].name.begin(), nodes[i].name.end(), '.'));
    }
  }
  const auto groups_at = [&](int level) {
    absl::flat_hash_set<std::string> groups;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (selected[i]) groups.insert(GroupKey(nodes[i], level));
    }
    return static_cast<int64_t>(groups.size());
  };
  int level = 0;
  for (int l = 1; l <= max_level; ++l) {
    if (groups_at(l) > std::min(options.max_nodes, kMaxGroups)) break;
    level = l;
  }
  const std::string smaller =
      "--filter NAME draws the nodes whose names contain NAME in full (e.g. --filter layer3.2.), "
      "--max_nodes N raises the limit (--max_nodes 0: every node; Graphviz may take many "
      "minutes), and --format html shows every node in an interactive page";
  if (level == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " nodes are more than --max_nodes ", options.max_nodes,
                     ", and so are their groups by top-level name (", groups_at(1), ", at most ",
                     std::min(options.max_nodes, kMaxGroups), " drawn): ", smaller));
  }
  view.collapse_level = level;
  view.dot = CollapsedDot(nodes, selected, level, view.drawn_nodes);
  view.note = absl::StrCat(count, " nodes are more than --max_nodes ", options.max_nodes,
                           ": drawn as ", view.drawn_nodes, " groups by the first ", level,
                           " part(s) of their names; ", smaller);
  return view;
}

absl::StatusOr<std::string> HtmlFromDumpJson(absl::string_view json, absl::string_view title) {
  ASSIGN_OR_RETURN(const JsonValue root, util::ParseJson(json));
  RETURN_IF_ERROR(ReadNodes(root).status());
  // Inside <script>, "</" could end the element; in JSON it can only occur inside a string,
  // where "<\/" means the same.
  const std::string safe_json = absl::StrReplaceAll(json, {{"</", "<\\/"}});
  const std::string safe_title =
      absl::StrReplaceAll(title, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
  return absl::StrCat(kDumpHtmlHead, "<title>", safe_title, "</title>\n", kDumpHtmlStyle,
                      "</head>\n<body>\n<h1>", safe_title, "</h1>\n", kDumpHtmlBody,
                      "<script type=\"application/json\" id=\"dump\">", safe_json, "</script>\n",
                      kDumpHtmlScript, "</body>\n</html>\n");
}

}  // namespace reprise::tools
