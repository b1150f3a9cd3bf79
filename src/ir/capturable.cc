// CheckCapturable: the plan-wide form of OpDef::capture, checked before anything is allocated.
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"

namespace reprise::ir {

absl::Status CheckCapturable(const Graph& graph) {
  for (const Node& node : graph.nodes()) {
    if (IsLeaf(node)) continue;
    if (node.op->lower == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "op '", node.op_name(), "' node '", node.name,
          "' has no GPU lowering, so the step cannot be captured (reprise has no eager fallback)"));
    }
    if (!node.op->capture.capturable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "op '", node.op_name(), "' node '", node.name,
          "' cannot be captured into a CUDA graph: its GPU lowering ",
          node.op->capture.reason.empty() ? "says it is not capturable" : node.op->capture.reason,
          " (reprise has no eager fallback)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace reprise::ir
