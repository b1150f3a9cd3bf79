#include "src/passes/dump_dot.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/ir/op_def.h"
#include "src/passes/plan_dump.h"

namespace reprise::passes {
namespace {

constexpr char kHeader[] =
    "  graph [fontname=\"Helvetica\", fontsize=11];\n"
    "  node [shape=box, style=\"rounded,filled\", fillcolor=\"white\", fontname=\"Helvetica\", "
    "fontsize=10];\n"
    "  edge [fontname=\"Helvetica\", fontsize=9];\n";
constexpr char kFusedColour[] = "#fdba74";
constexpr int kNamesPerLine = 3;

std::string NodeId(int32_t id) { return absl::StrCat("n", id); }

std::string SpecsOf(const Node& n) {
  std::vector<std::string> specs;
  for (const TensorSpec& s : n.outputs) specs.push_back(s.ToString());
  return specs.empty() ? "(in place)" : absl::StrJoin(specs, ", ");
}

absl::string_view LeafColour(const Node& n) {
  const absl::string_view op = n.op_name();
  if (op == "input") return "#bfdbfe";
  if (op == "parameter") return "#bbf7d0";
  return "#e5e7eb";  // State and constants.
}

// One node statement; `launch` is the node's launch index in a plan, or -1.
std::string NodeStatement(const Node& n, int launch) {
  std::string label = absl::StrCat(n.name, "\n", n.op_name());
  if (launch >= 0) absl::StrAppend(&label, " (launch ", launch + 1, ")");
  absl::StrAppend(&label, "\n", SpecsOf(n));
  std::string attrs;
  if (ir::IsLeaf(n)) {
    absl::StrAppend(&attrs, ", shape=ellipse, fillcolor=\"", LeafColour(n), "\"");
  }
  const std::vector<std::string> fused = FusedNodeNames(n);
  if (!fused.empty()) {
    absl::StrAppend(&label, "\nfuses:");
    for (size_t i = 0; i < fused.size(); ++i) {
      absl::StrAppend(&label, i % kNamesPerLine == 0 ? "\n" : ", ", fused[i]);
    }
    absl::StrAppend(&attrs, ", fillcolor=\"", kFusedColour, "\", penwidth=2, tooltip=",
                    DotQuote(absl::StrCat("fuses ", absl::StrJoin(fused, ", "))));
  }
  return absl::StrCat(NodeId(n.id), " [label=", DotQuote(label), attrs, "];\n");
}

void AppendEdges(const Graph& graph, std::string& out) {
  for (const Node& n : graph.nodes()) {
    for (const Value& v : n.inputs) {
      std::string label = graph.spec(v).ToString();
      if (graph.node(v.node).outputs.size() > 1) absl::StrAppend(&label, " (:", v.output, ")");
      absl::StrAppend(&out, "  ", NodeId(v.node), " -> ", NodeId(n.id), " [label=", DotQuote(label),
                      "];\n");
    }
    for (int32_t before : n.control_inputs) {
      absl::StrAppend(&out, "  ", NodeId(before), " -> ", NodeId(n.id),
                      " [style=dashed, color=\"#6b7280\", tooltip=\"control\"];\n");
    }
  }
}

}  // namespace

std::string DotQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c != '\r') {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string GraphToDot(const Graph& graph) {
  std::string out = absl::StrCat("digraph reprise {\n", kHeader);
  for (const Node& n : graph.nodes()) absl::StrAppend(&out, "  ", NodeStatement(n, -1));
  AppendEdges(graph, out);
  absl::StrAppend(&out, "}\n");
  return out;
}

std::string PlanToDot(const Plan& plan) {
  const Graph& g = plan.graph();
  std::vector<int> launch_of(g.num_nodes(), -1);
  std::map<int, std::vector<int>> lanes;  // Lane -> its launches, in order.
  for (int i = 0; i < static_cast<int>(plan.launches.size()); ++i) {
    launch_of[plan.launches[i].node] = i;
    lanes[plan.launches[i].lane].push_back(i);
  }
  lanes.try_emplace(0);  // Lane 0 holds the input copy even when it runs nothing else.

  std::string out = absl::StrCat("digraph reprise {\n", kHeader);
  for (const Node& n : g.nodes()) {
    if (launch_of[n.id] < 0) absl::StrAppend(&out, "  ", NodeStatement(n, -1));
  }
  for (const auto& [lane, launches] : lanes) {
    absl::StrAppend(&out, "  subgraph cluster_lane", lane,
                    " {\n    label=", DotQuote(absl::StrCat("lane ", lane)),
                    ";\n    style=\"rounded,dashed\";\n");
    if (lane == 0) {
      absl::StrAppend(&out, "    copy_inputs [label=",
                      DotQuote(absl::StrCat("copy_inputs\nmemcpy H2D (launch 0)\n",
                                            plan.memory.input_bytes, " bytes")),
                      ", fillcolor=\"#c7d2fe\"];\n");
    }
    for (int i : launches) {
      absl::StrAppend(&out, "    ", NodeStatement(g.node(plan.launches[i].node), i));
    }
    absl::StrAppend(&out, "  }\n");
  }
  for (int32_t id : g.NodesOf("input")) {
    absl::StrAppend(&out, "  copy_inputs -> ", NodeId(id), " [style=dotted];\n");
  }
  AppendEdges(g, out);
  for (const ScheduledLaunch& launch : plan.launches) {
    for (int wait : launch.waits) {
      if (wait < 0 || wait >= static_cast<int>(plan.launches.size())) continue;
      absl::StrAppend(&out, "  ", NodeId(plan.launches[wait].node), " -> ", NodeId(launch.node),
                      " [style=dotted, color=\"#2563eb\", label=\"wait\", constraint=false];\n");
    }
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace reprise::passes
