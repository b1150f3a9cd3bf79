// Reading a captured CUDA graph back: its nodes (cudaGraphGetNodes, cudaGraphNodeGetType; kernel
// names through the driver's cuGraphKernelNodeGetParams and cuFuncGetName / cuKernelGetName), its
// edges (cudaGraphGetEdges), and the plan launch each node came from (graph_attribution.h). Also
// CUDA's own DOT of the graph (cudaGraphDebugDotPrint). Needs the graph's device to be current.
#ifndef REPRISE_CAPTURE_GRAPH_INSPECT_H_
#define REPRISE_CAPTURE_GRAPH_INSPECT_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "capture/graph_dump.h"
#include "capture/lowered_step.h"

namespace reprise::capture {

// "kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event", "event_record", ...
absl::string_view CudaGraphNodeTypeName(cudaGraphNodeType type);

// What `launch` tells about the nodes it records: host-only.
LaunchSignature SignatureOf(const LoweredLaunch& launch);

// The nodes of `graph` in capture order (creation order where that is topological, as stream
// capture makes it; otherwise a topological order that keeps it as far as it can), their edges,
// and each node's launch among `launches` (the sequence that was captured). A kernel whose name
// the driver does not give has an empty kernel_name. With `launch_last_nodes` (what capture saw
// each launch end with, CapturedStep::launch_nodes()), every node is attributed exactly: a launch
// owns its last nodes and every node before them back to another launch's last nodes.
absl::StatusOr<CudaGraphDump> InspectCudaGraph(
    cudaGraph_t graph, absl::Span<const LoweredLaunch> launches,
    absl::Span<const std::vector<cudaGraphNode_t>> launch_last_nodes = {});

// CUDA's own DOT of `graph` (every debug flag on), written by cudaGraphDebugDotPrint to a temporary
// file and read back. CUDA names its nodes its own way, so the annotation is a `//` comment block
// before it that maps each node handle (which the verbose DOT prints) to the node's kernel and
// reprise node from `dump`.
absl::StatusOr<std::string> CudaGraphDebugDot(cudaGraph_t graph, const CudaGraphDump& dump);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_GRAPH_INSPECT_H_
