#include "src/passes/schedule.h"

#include <algorithm>
#include <queue>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"

namespace reprise::passes {

namespace {

bool IsWeightGradient(const Node& node) {
  auto it = node.attrs.find("role");
  return it != node.attrs.end() && std::holds_alternative<std::string>(it->second) &&
         std::get<std::string>(it->second) == "wgrad";
}

int LaneOf(const Node& node, int lanes) {
  if (lanes < 2) return 0;
  return IsWeightGradient(node) || node.op->kind == ir::OpKind::kOptimizer ? 1 : 0;
}

// Fills lanes and the fewest waits that order every cross-lane dependency.
void AssignLanes(const Graph& graph, int lanes, std::vector<ScheduledLaunch>& order) {
  std::vector<int> position(graph.num_nodes(), -1);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    position[order[i].node] = i;
    order[i].lane = LaneOf(graph.node(order[i].node), lanes);
  }
  // waited[l][m]: the latest launch on lane m that lane l has already waited for.
  std::vector<std::vector<int>> waited(lanes, std::vector<int>(lanes, -1));
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const Node& node = graph.node(order[i].node);
    const int lane = order[i].lane;
    std::vector<int> latest(lanes, -1);
    auto need = [&](int32_t producer) {
      const int p = position[producer];
      if (p >= 0 && order[p].lane != lane)
        latest[order[p].lane] = std::max(latest[order[p].lane], p);
    };
    for (const Value& v : node.inputs) need(v.node);
    for (int32_t c : node.control_inputs) need(c);
    for (int other = 0; other < lanes; ++other) {
      if (latest[other] > waited[lane][other]) {
        order[i].waits.push_back(latest[other]);
        waited[lane][other] = latest[other];
      }
    }
  }
}

}  // namespace

HappensBefore::HappensBefore(absl::Span<const ScheduledLaunch> schedule) {
  int lanes = 1;
  for (const ScheduledLaunch& l : schedule) lanes = std::max(lanes, l.lane + 1);
  std::vector<int> last_on_lane(lanes, -1);
  for (int i = 0; i < static_cast<int>(schedule.size()); ++i) {
    const int lane = schedule[i].lane;
    std::vector<int> clock(lanes, -1);
    const int previous = last_on_lane[lane];
    if (previous >= 0) {
      clock = clock_[previous];
      clock[lane] = previous;
    }
    for (int w : schedule[i].waits) {
      for (int l = 0; l < lanes; ++l) clock[l] = std::max(clock[l], clock_[w][l]);
      clock[schedule[w].lane] = std::max(clock[schedule[w].lane], w);
    }
    lane_.push_back(lane);
    clock_.push_back(std::move(clock));
    last_on_lane[lane] = i;
  }
}

bool HappensBefore::operator()(int a, int b) const {
  if (a == b) return false;
  if (lane_[a] == lane_[b]) return a < b;
  return clock_[b][lane_[a]] >= a;
}

absl::StatusOr<std::vector<ScheduledLaunch>> Schedule(const Graph& graph,
                                                      const ScheduleOptions& options) {
  if (options.lanes < 0 || options.lanes > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes must be 0 (auto), 1 or 2, got ", options.lanes));
  }
  int lanes = options.lanes;
  if (lanes == 0) {  // Auto: a second lane only pays where weight gradients can run beside.
    lanes = 1;
    for (const Node& node : graph.nodes()) lanes = IsWeightGradient(node) ? 2 : lanes;
  }
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
  AssignLanes(graph, lanes, order);
  return order;
}

}  // namespace reprise::passes
