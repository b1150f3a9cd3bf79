#include "src/passes/schedule.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"

namespace reprise::passes {

absl::StatusOr<std::vector<ScheduledLaunch>> Schedule(const Graph& graph) {
  const int n = graph.num_nodes();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int32_t>> users(n);
  auto edge = [&](int32_t from, int32_t to) {
    if (ir::IsLeaf(graph.node(from))) return;
    ++pending[to];
    users[from].push_back(to);
  };
  for (const Node& node : graph.nodes()) {
    for (const Value& v : node.inputs) edge(v.node, node.id);
    for (int32_t c : node.control_inputs) edge(c, node.id);
  }
  // Ready nodes: optimizer updates first (each frees a gradient), then lowest id.
  auto later = [&](int32_t a, int32_t b) {
    const bool opt_a = graph.node(a).op->kind == ir::OpKind::kOptimizer;
    const bool opt_b = graph.node(b).op->kind == ir::OpKind::kOptimizer;
    if (opt_a != opt_b) return opt_b;
    return a > b;
  };
  std::priority_queue<int32_t, std::vector<int32_t>, decltype(later)> ready(later);
  int non_leaf = 0;
  for (const Node& node : graph.nodes()) {
    if (ir::IsLeaf(node)) continue;
    ++non_leaf;
    if (pending[node.id] == 0) ready.push(node.id);
  }
  std::vector<ScheduledLaunch> order;
  while (!ready.empty()) {
    const int32_t id = ready.top();
    ready.pop();
    order.push_back({id, 0, {}});
    for (int32_t u : users[id]) {
      if (--pending[u] == 0) ready.push(u);
    }
  }
  if (static_cast<int>(order.size()) != non_leaf) {
    return absl::InvalidArgumentError(absl::StrCat("the graph has a cycle: scheduled ",
                                                   order.size(), " of ", non_leaf, " nodes"));
  }
  return order;
}

}  // namespace reprise::passes
