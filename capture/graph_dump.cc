#include "capture/graph_dump.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/passes/dump_dot.h"
#include "src/passes/dump_json.h"

namespace reprise::capture {
namespace {

using util::JsonWriter;

constexpr size_t kLabelKernelChars = 48;  // Library kernel names run to hundreds of characters.

std::string Candidates(const CudaGraphDump& dump, const NodeOrigin& origin) {
  std::vector<std::string> names;
  for (int j : origin.candidates) names.push_back(dump.launches[j].node_name);
  return absl::StrJoin(names, ", ");
}

std::string OriginText(const CudaGraphDump& dump, const CudaGraphNode& n) {
  std::string out = absl::StrCat(dump.RepriseNodeName(n), " [", AttributionName(n.origin.how), "]");
  if (n.origin.how == Attribution::kUnknown && !n.origin.candidates.empty()) {
    absl::StrAppend(&out, " (one of ", Candidates(dump, n.origin), ")");
  }
  return out;
}

absl::string_view LaunchKind(const LaunchSignature& launch) {
  if (launch.is_copy) return "copy";
  return launch.kernel_names.empty() ? "library" : "nvrtc";
}

std::string ShortKernelName(const std::string& name) {
  if (name.size() <= kLabelKernelChars) return name;
  return absl::StrCat(name.substr(0, kLabelKernelChars - 3), "...");
}

}  // namespace

int64_t CudaGraphDump::NumNodesOfType(absl::string_view type) const {
  int64_t count = 0;
  for (const CudaGraphNode& n : nodes) count += n.node.type == type ? 1 : 0;
  return count;
}

std::string CudaGraphDump::RepriseNodeName(const CudaGraphNode& node) const {
  if (node.origin.launch < 0) return "unknown";
  return launches[node.origin.launch].node_name;
}

std::string CudaGraphToText(const CudaGraphDump& dump) {
  std::map<std::string, int> types;
  for (const CudaGraphNode& n : dump.nodes) ++types[n.node.type];
  std::vector<std::string> counts;
  for (const auto& [type, count] : types) counts.push_back(absl::StrCat(count, " ", type));
  std::string out =
      absl::StrCat("cuda graph: ", dump.nodes.size(), " nodes (", absl::StrJoin(counts, ", "),
                   "), ", dump.edges.size(), " edges (", dump.programmatic_edges,
                   " programmatic); plan: ", dump.launches.size(), " launches\n");
  for (size_t i = 0; i < dump.nodes.size(); ++i) {
    const CudaGraphNode& n = dump.nodes[i];
    absl::StrAppend(&out, "node ", i, ": ", n.node.type,
                    n.node.kernel_name.empty() ? "" : absl::StrCat(" ", n.node.kernel_name), " -> ",
                    OriginText(dump, n), "\n");
  }
  absl::StrAppend(&out, "edges:\n");
  for (const auto& [from, to] : dump.edges) absl::StrAppend(&out, "  ", from, " -> ", to, "\n");
  return out;
}

std::string CudaGraphToJson(const passes::Plan& plan, const CudaGraphDump& dump) {
  JsonWriter w;
  w.BeginObject();
  passes::WritePlanMembers(plan, "cuda-graph", w);
  w.Key("cuda_graph").BeginObject();
  w.Key("num_nodes").Int(static_cast<int64_t>(dump.nodes.size()));
  w.Key("num_edges").Int(static_cast<int64_t>(dump.edges.size()));
  w.Key("num_programmatic_edges").Int(dump.programmatic_edges);
  std::map<std::string, int> types;
  for (const CudaGraphNode& n : dump.nodes) ++types[n.node.type];
  w.Key("node_types").BeginObject(JsonWriter::kInline);
  for (const auto& [type, count] : types) w.Key(type).Int(count);
  w.EndObject();
  w.Key("launches").BeginArray();
  for (size_t j = 0; j < dump.launches.size(); ++j) {
    const LaunchSignature& launch = dump.launches[j];
    w.BeginObject(JsonWriter::kInline).Key("index").Int(static_cast<int64_t>(j));
    w.Key("node").String(launch.node_name).Key("lane").Int(launch.lane);
    w.Key("kind").String(LaunchKind(launch)).Key("kernels").BeginArray();
    for (const std::string& name : launch.kernel_names) w.String(name);
    w.EndArray().EndObject();
  }
  w.EndArray();
  w.Key("nodes").BeginArray();
  for (size_t i = 0; i < dump.nodes.size(); ++i) {
    const CudaGraphNode& n = dump.nodes[i];
    w.BeginObject(JsonWriter::kInline).Key("index").Int(static_cast<int64_t>(i));
    w.Key("type").String(n.node.type).Key("kernel").String(n.node.kernel_name);
    w.Key("launch");
    if (n.origin.launch >= 0) {
      w.Int(n.origin.launch);
    } else {
      w.Null();
    }
    w.Key("reprise_node").String(dump.RepriseNodeName(n));
    w.Key("attribution").String(AttributionName(n.origin.how));
    w.Key("candidates").BeginArray();
    for (int j : n.origin.candidates) w.Int(j);
    w.EndArray().EndObject();
  }
  w.EndArray();
  w.Key("edges").BeginArray();
  for (const auto& [from, to] : dump.edges) {
    w.BeginArray(JsonWriter::kInline).Int(from).Int(to).EndArray();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return std::move(w).str();
}

std::string CudaGraphToDot(const CudaGraphDump& dump) {
  std::string out =
      "digraph cuda_graph {\n"
      "  graph [fontname=\"Helvetica\", fontsize=11];\n"
      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"white\", fontname=\"Helvetica\", "
      "fontsize=10];\n";
  std::map<int, std::string> lanes;  // Lane -> the statements of its nodes.
  std::string unattributed;
  for (size_t i = 0; i < dump.nodes.size(); ++i) {
    const CudaGraphNode& n = dump.nodes[i];
    std::string label = absl::StrCat("#", i, " ", n.node.type);
    if (!n.node.kernel_name.empty()) {
      absl::StrAppend(&label, "\n", ShortKernelName(n.node.kernel_name));
    }
    absl::StrAppend(&label, "\n", OriginText(dump, n));
    std::string attrs = absl::StrCat("label=", passes::DotQuote(label));
    if (!n.node.kernel_name.empty()) {
      absl::StrAppend(&attrs, ", tooltip=", passes::DotQuote(n.node.kernel_name));
    }
    if (n.node.type == "memcpy") absl::StrAppend(&attrs, ", fillcolor=\"#c7d2fe\"");
    if (n.origin.how == Attribution::kExact) absl::StrAppend(&attrs, ", penwidth=2");
    const std::string statement = absl::StrCat("c", i, " [", attrs);
    if (n.origin.launch < 0) {
      absl::StrAppend(&unattributed, "  ", statement,
                      ", style=\"rounded,filled,dashed\", fillcolor=\"#e5e7eb\"];\n");
    } else {
      absl::StrAppend(&lanes[dump.launches[n.origin.launch].lane], "    ", statement, "];\n");
    }
  }
  for (const auto& [lane, statements] : lanes) {
    absl::StrAppend(&out, "  subgraph cluster_lane", lane,
                    " {\n    label=", passes::DotQuote(absl::StrCat("lane ", lane)),
                    ";\n    style=\"rounded,dashed\";\n", statements, "  }\n");
  }
  absl::StrAppend(&out, unattributed);
  for (const auto& [from, to] : dump.edges) absl::StrAppend(&out, "  c", from, " -> c", to, ";\n");
  absl::StrAppend(&out, "}\n");
  return out;
}

absl::StatusOr<std::string> FormatCudaGraph(const passes::Plan& plan, const CudaGraphDump& dump,
                                            passes::DumpFormat format) {
  switch (format) {
    case passes::DumpFormat::kText:
      return CudaGraphToText(dump);
    case passes::DumpFormat::kJson:
      return CudaGraphToJson(plan, dump);
    case passes::DumpFormat::kDot:
    case passes::DumpFormat::kSvg:
      return passes::FinishDot(CudaGraphToDot(dump), format);
  }
  return absl::InvalidArgumentError("unknown dump format");
}

}  // namespace reprise::capture
