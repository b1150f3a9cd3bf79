// Which launch of the plan each node of a captured CUDA graph came from. Capture records the
// launches in plan order, but a launch may add more than one node: a cuBLASLt GEMM may add a
// memset or a split-K reduction besides its kernel, and its kernels have library names we cannot
// know in advance. So nodes are matched in capture order against anchors we can be sure of: the
// input copy is the first memcpy, and an NVRTC launch is the next kernel node of its kernel's name
// (kExact). Library launches between two anchors get the nodes between them (kInferred) where the
// count decides it: one launch owns the whole gap, or the gap holds as many nodes as launches
// (each adds at least one). Everything else is kUnknown, with the launches it may belong to.
#ifndef REPRISE_CAPTURE_GRAPH_ATTRIBUTION_H_
#define REPRISE_CAPTURE_GRAPH_ATTRIBUTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace reprise::capture {

// What a lowered launch tells us about the nodes it records.
struct LaunchSignature {
  std::string node_name;  // The plan node, or "copy_inputs".
  int lane = 0;
  bool is_copy = false;  // The input copy: memcpy nodes or one gather kernel (anchored once).
  std::vector<std::string> kernel_names;  // NVRTC kernels, in launch order; empty: a library call.
};

// What the CUDA graph tells us about one of its nodes.
struct CapturedNode {
  std::string type;         // "kernel", "memcpy", "memset", ... (CudaGraphNodeTypeName).
  std::string kernel_name;  // Kernel nodes: the function's name; may be empty if unknown.
  uintptr_t handle = 0;     // The cudaGraphNode_t, to find the node in CUDA's own DOT.
};

enum class Attribution : uint8_t { kExact, kInferred, kUnknown };
absl::string_view AttributionName(Attribution a);  // "exact", "inferred", "unknown"

struct NodeOrigin {
  int launch = -1;  // Index into the launches; -1 when unknown.
  Attribution how = Attribution::kUnknown;
  std::vector<int> candidates;  // kUnknown: the launches the node may belong to (may be empty).
};

// `nodes` in capture order (a topological order that keeps creation order, see graph_inspect.h);
// returns one origin per node.
std::vector<NodeOrigin> AttributeNodes(absl::Span<const CapturedNode> nodes,
                                       absl::Span<const LaunchSignature> launches);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_GRAPH_ATTRIBUTION_H_
