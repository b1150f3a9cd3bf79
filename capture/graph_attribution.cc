#include "capture/graph_attribution.h"

#include "src/runtime/gather_list.h"

namespace reprise::capture {
namespace {

// Assigns the nodes [begin, end) that lie between two anchors to the launches `pending` that were
// recorded between them, where the counts make it certain.
void ResolveGap(int begin, int end, const std::vector<int>& pending, bool certain,
                std::vector<NodeOrigin>& origins) {
  const int gap = end - begin;
  if (gap <= 0) return;
  const int launches = static_cast<int>(pending.size());
  for (int k = 0; k < gap; ++k) {
    NodeOrigin& origin = origins[begin + k];
    if (certain && launches == 1) {
      origin = {pending[0], Attribution::kInferred, {}};
    } else if (certain && launches == gap) {
      origin = {pending[k], Attribution::kInferred, {}};
    } else {
      origin = {-1, Attribution::kUnknown, pending};
    }
  }
}

bool Matches(const CapturedNode& node, const LaunchSignature& launch, int kernel) {
  if (launch.is_copy) {  // Its memcpy nodes, or its one gather kernel (InputCopy::Gathers).
    return node.type == "memcpy" ||
           (node.type == "kernel" && node.kernel_name == runtime::kGatherKernelName);
  }
  return node.type == "kernel" && node.kernel_name == launch.kernel_names[kernel];
}

}  // namespace

absl::string_view AttributionName(Attribution a) {
  switch (a) {
    case Attribution::kExact:
      return "exact";
    case Attribution::kInferred:
      return "inferred";
    case Attribution::kUnknown:
      return "unknown";
  }
  return "?";
}

std::vector<NodeOrigin> AttributeNodes(absl::Span<const CapturedNode> nodes,
                                       absl::Span<const LaunchSignature> launches) {
  const int n = static_cast<int>(nodes.size());
  std::vector<NodeOrigin> origins(n);
  int next = 0;              // First node not yet matched or skipped.
  std::vector<int> pending;  // Launches since the last anchor whose nodes we cannot name.
  bool gap_certain = true;   // False once a launch in the gap may have added no node.
  for (int j = 0; j < static_cast<int>(launches.size()); ++j) {
    const LaunchSignature& launch = launches[j];
    const int anchors = launch.is_copy ? 1 : static_cast<int>(launch.kernel_names.size());
    if (anchors == 0) {  // A library call: its nodes are found between anchors.
      pending.push_back(j);
      continue;
    }
    for (int a = 0; a < anchors; ++a) {
      int found = next;
      while (found < n && !Matches(nodes[found], launch, a)) ++found;
      if (found == n) {
        // Not in the graph: the rest of this launch is treated like a library call, and the gap
        // it falls in can no longer be counted.
        pending.push_back(j);
        gap_certain = false;
        break;
      }
      ResolveGap(next, found, pending, gap_certain, origins);
      pending.clear();
      gap_certain = true;
      origins[found] = {j, Attribution::kExact, {}};
      next = found + 1;
    }
  }
  ResolveGap(next, n, pending, gap_certain, origins);
  return origins;
}

}  // namespace reprise::capture
