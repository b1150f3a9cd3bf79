#include "src/passes/schedule.h"

#include <algorithm>
#include <queue>
#include <string>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/util/checked_math.h"

namespace reprise::passes {

bool IsWeightGradient(const Node& node) {
  auto it = node.attrs.find("role");
  return it != node.attrs.end() && std::holds_alternative<std::string>(it->second) &&
         std::get<std::string>(it->second) == "wgrad";
}

namespace {

bool IsCommunication(const Node& node) { return node.op->kind == ir::OpKind::kCommunication; }

// The order that writes in place imply, beyond the data and control edges: the graph means what
// running its nodes in id order means (the CPU reference does), so for each parameter or state a
// node writes in place, its readers and writers keep their id order around each write. Per node,
// the earlier nodes it must follow: a writer follows the previous writer and every reader since;
// a reader follows the previous writer. Two updates of the same state that nothing else orders
// (a refresh of the 16-bit copies and the optimizer that rewrites them) run in id order. Ids are
// topological, so these edges point forward, like every other, and can make no cycle.
std::vector<std::vector<int32_t>> InPlaceOrder(const Graph& graph) {
  const int n = graph.num_nodes();
  std::vector<bool> written(n, false);
  for (const Node& node : graph.nodes()) {
    for (int m : ir::MutatedInputs(node)) written[node.inputs[m].node] = true;
  }
  struct Touches {
    int32_t writer = -1;
    std::vector<int32_t> readers;  // Since the last writer.
  };
  absl::flat_hash_map<int32_t, Touches> leaves;
  std::vector<std::vector<int32_t>> after(n);
  for (const Node& node : graph.nodes()) {
    if (ir::IsLeaf(node)) continue;
    const std::vector<int> mutated = ir::MutatedInputs(node);
    for (int i = 0; i < static_cast<int>(node.inputs.size()); ++i) {
      const int32_t leaf = node.inputs[i].node;
      if (!written[leaf]) continue;
      Touches& t = leaves[leaf];
      const bool writes = std::find(mutated.begin(), mutated.end(), i) != mutated.end();
      if (t.writer >= 0 && t.writer != node.id) after[node.id].push_back(t.writer);
      if (!writes) {
        if (t.readers.empty() || t.readers.back() != node.id) t.readers.push_back(node.id);
        continue;
      }
      for (int32_t reader : t.readers) {
        if (reader != node.id) after[node.id].push_back(reader);
      }
      t.readers.clear();
      t.writer = node.id;
    }
    std::vector<int32_t>& mine = after[node.id];
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  }
  return after;
}

// The nodes lane 1 holds whenever there are two lanes or more: weight gradients, optimizer
// updates, the nodes whose every reader is a weight gradient or another such node (a
// recomputed activation that only a weight gradient reads: running it beside the data-gradient
// chain, not in it, keeps it off the critical path), and the nodes that read nothing but such
// nodes' outputs and leaves (a weight gradient's cast back to float32 under mixed precision:
// on lane 0 it would wait there for lane 1's product). Node ids are topological, so readers
// come later.
std::vector<bool> WeightLaneNodes(const Graph& graph) {
  const int n = graph.num_nodes();
  std::vector<bool> weight(n, false);
  std::vector<int> readers(n, 0), feeding_weight_only(n, 0);
  for (int32_t id = n - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    if (ir::IsLeaf(node)) continue;
    const bool feeds =
        IsWeightGradient(node) || (readers[id] > 0 && readers[id] == feeding_weight_only[id]);
    weight[id] = feeds || node.op->kind == ir::OpKind::kOptimizer;
    for (const Value& v : node.inputs) {
      ++readers[v.node];
      if (feeds) ++feeding_weight_only[v.node];
    }
  }
  for (int32_t id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (weight[id] || ir::IsLeaf(node) || IsCommunication(node)) continue;
    bool computed_input = false, all_weight = true;
    for (const Value& v : node.inputs) {
      if (ir::IsLeaf(graph.node(v.node))) continue;
      computed_input = true;
      all_weight = all_weight && weight[v.node];
    }
    weight[id] = computed_input && all_weight;
  }
  return weight;
}

// Estimated device cost of a node, to find the step's critical path: bytes written, weighted up
// for the ops whose time grows with more than their output (GEMMs, convolutions).
int64_t CostOf(const Node& node) {
  int64_t bytes = 0;
  for (const TensorSpec& out : node.outputs) bytes = SaturatingAdd(bytes, out.bytes());
  return std::max<int64_t>(1,
                           node.op->kind == ir::OpKind::kMatmul ? SaturatingMul(8, bytes) : bytes);
}

// With three or more lanes: the nodes off the critical path (the longest chain by CostOf), apart
// from weight gradients and optimizer updates, go to lanes 2, 3, ...: a side branch (ResNet's
// downsample convolution, its data gradient) runs beside the main chain. A side node follows its
// side producer's lane, so a branch stays on one lane; new branches take the side lanes in turn.
std::vector<int> SideLanes(const Graph& graph, absl::Span<const ScheduledLaunch> order,
                           const std::vector<bool>& weight_lane, int lanes) {
  const int n = graph.num_nodes();
  // Longest chain ending at the node, in cost, over the nodes lanes 0 and 2+ may hold: weight
  // gradients and updates have lane 1 whatever the path, so they neither end nor carry it.
  std::vector<int64_t> longest(n, 0);
  std::vector<int32_t> via(n, -1);
  for (const ScheduledLaunch& launch : order) {  // A topological order.
    const Node& node = graph.node(launch.node);
    if (weight_lane[node.id] || IsCommunication(node)) continue;
    int64_t best = 0;
    auto consider = [&](int32_t producer) {
      if (ir::IsLeaf(graph.node(producer)) || longest[producer] <= best) return;
      best = longest[producer];
      via[node.id] = producer;
    };
    for (const Value& v : node.inputs) consider(v.node);
    for (int32_t c : node.control_inputs) consider(c);
    longest[node.id] = SaturatingAdd(best, CostOf(node));
  }
  std::vector<bool> critical(n, false);
  int32_t end = -1;
  for (const ScheduledLaunch& launch : order) {
    if (end < 0 || longest[launch.node] > longest[end]) end = launch.node;
  }
  for (int32_t v = end; v >= 0; v = via[v]) critical[v] = true;
  std::vector<int> lane(n, 0);
  int next_side = 0;
  for (const ScheduledLaunch& launch : order) {
    const Node& node = graph.node(launch.node);
    if (weight_lane[node.id]) {
      lane[node.id] = 1;
      continue;
    }
    if (critical[node.id]) continue;
    int chosen = -1;
    for (const Value& v : node.inputs) {
      if (!ir::IsLeaf(graph.node(v.node)) && lane[v.node] >= 2) chosen = lane[v.node];
    }
    if (chosen < 0) chosen = 2 + (next_side++ % (lanes - 2));
    lane[node.id] = chosen;
  }
  return lane;
}

// Fills lanes and the fewest waits that order every cross-lane dependency. With a communication
// lane (comm_lane >= 0, one past the compute lanes) the collectives run there, and so do the
// optimizer's nodes and whatever reads a collective's result (a cast widening an averaged 16-bit
// gradient): each update follows its bucket's all-reduce on that stream, so no compute lane ever
// queues behind a launch that waits for communication.
void AssignLanes(const Graph& graph, const std::vector<std::vector<int32_t>>& in_place, int lanes,
                 int comm_lane, std::vector<ScheduledLaunch>& order) {
  std::vector<int> position(graph.num_nodes(), -1);
  const std::vector<bool> weight_lane = WeightLaneNodes(graph);
  const std::vector<int> side =
      lanes > 2 ? SideLanes(graph, order, weight_lane, lanes) : std::vector<int>{};
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const Node& node = graph.node(order[i].node);
    position[node.id] = i;
    order[i].lane = lanes > 2 ? side[node.id] : (lanes == 2 && weight_lane[node.id] ? 1 : 0);
    bool after_collective = false;
    for (const Value& v : node.inputs) after_collective |= IsCommunication(graph.node(v.node));
    if (comm_lane >= 0 &&
        (IsCommunication(node) || node.op->kind == ir::OpKind::kOptimizer || after_collective)) {
      order[i].lane = comm_lane;
    }
  }
  if (comm_lane >= 0) lanes = comm_lane + 1;
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
    for (int32_t earlier : in_place[node.id]) need(earlier);
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
  if (options.lanes < 0 || options.lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes must be 0 (auto) or 1 to ", kMaxLanes, ", got ", options.lanes));
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
  const std::vector<std::vector<int32_t>> in_place = InPlaceOrder(graph);
  for (int32_t id = 0; id < n; ++id) {
    for (int32_t earlier : in_place[id]) edge(earlier, id);
  }
  // Ready nodes: collectives first (a bucket's all-reduce starts as soon as its last gradient is
  // made), then optimizer updates (each frees a gradient), then lowest id.
  auto rank = [&](int32_t id) {
    const ir::OpKind kind = graph.node(id).op->kind;
    return kind == ir::OpKind::kCommunication ? 2 : kind == ir::OpKind::kOptimizer ? 1 : 0;
  };
  auto later = [&](int32_t a, int32_t b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
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
  const bool communicates = std::any_of(graph.nodes().begin(), graph.nodes().end(),
                                        [](const Node& n) { return IsCommunication(n); });
  AssignLanes(graph, in_place, lanes, communicates ? lanes : -1, order);
  return order;
}

}  // namespace reprise::passes
