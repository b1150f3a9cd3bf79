// The captured CUDA graph of a training step as plain data, and its dumps for reprise-dump
// --stage cuda-graph: every node with its type, its kernel's name and the plan launch it came from
// (capture/graph_attribution.h), and every edge. graph_inspect.h reads it from a cudaGraph_t;
// everything here is host-only, so tests can format a dump without a GPU.
#ifndef REPRISE_CAPTURE_GRAPH_DUMP_H_
#define REPRISE_CAPTURE_GRAPH_DUMP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "capture/graph_attribution.h"
#include "src/passes/plan.h"
#include "src/passes/plan_dump.h"

namespace reprise::capture {

struct CudaGraphNode {
  CapturedNode node;
  NodeOrigin origin;
};

struct CudaGraphDump {
  std::vector<LaunchSignature> launches;   // The lowered launches, the input copy first.
  std::vector<CudaGraphNode> nodes;        // In capture order.
  std::vector<std::pair<int, int>> edges;  // (from, to) as indices into `nodes`.
  // Edges that let the later kernel be scheduled before the earlier one ends (programmatic
  // dependent launch: TrainOptions::kernels.dependent_launch).
  int64_t programmatic_edges = 0;
  std::vector<std::pair<int, int>> programmatic;  // Those edges, (from, to) as in `edges`.

  int64_t NumNodesOfType(absl::string_view type) const;
  // The reprise node a CUDA graph node came from: the launch's node name, or "unknown".
  std::string RepriseNodeName(const CudaGraphNode& node) const;
};

// One line per CUDA graph node (index, type, kernel, reprise node and how sure), then the edges.
std::string CudaGraphToText(const CudaGraphDump& dump);
// The plan's JSON dump (stage "cuda-graph") with a "cuda_graph" member: docs/dump_schema.md.
std::string CudaGraphToJson(const passes::Plan& plan, const CudaGraphDump& dump);
// Graphviz DOT: kernel nodes labelled with kernel and reprise node, clustered by lane; nodes whose
// origin is unknown are drawn grey and dashed.
std::string CudaGraphToDot(const CudaGraphDump& dump);
// Whichever of the three `format` asks for; svg renders the DOT with Graphviz.
absl::StatusOr<std::string> FormatCudaGraph(const passes::Plan& plan, const CudaGraphDump& dump,
                                            passes::DumpFormat format);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_GRAPH_DUMP_H_
