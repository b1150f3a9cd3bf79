#include "src/passes/memory_plan.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

int64_t AlignUp(int64_t x) {
  return (x + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

BufferClass ClassOf(const Node& node, bool kept) {
  if (node.op == &ir::ParameterOp()) return BufferClass::kParameter;
  if (node.op == &ir::StateOp()) return BufferClass::kOptimizerState;
  if (node.op == &ir::ConstantOp()) return BufferClass::kConstant;
  if (node.op == &ir::InputOp()) return BufferClass::kInput;
  return kept ? BufferClass::kFetched : BufferClass::kActivation;
}

// First fit over the gaps between live blocks (offset, size), sorted by offset; blocks may
// overlap (a big one and a small one that reused its head).
int64_t FirstFit(const std::vector<std::pair<int64_t, int64_t>>& live, int64_t bytes) {
  int64_t cursor = 0;
  for (const auto& [offset, size] : live) {
    if (offset - cursor >= bytes) return cursor;
    cursor = std::max(cursor, offset + size);
  }
  return cursor;
}

int64_t AlignedSize(const Buffer& b) { return AlignUp(std::max<int64_t>(b.bytes, 1)); }

}  // namespace

absl::string_view BufferClassName(BufferClass c) {
  switch (c) {
    case BufferClass::kParameter:
      return "parameter";
    case BufferClass::kOptimizerState:
      return "optimizer_state";
    case BufferClass::kConstant:
      return "constant";
    case BufferClass::kFetched:
      return "fetched";
    case BufferClass::kInput:
      return "input";
    case BufferClass::kActivation:
      return "activation";
  }
  return "?";
}

const Buffer* MemoryPlan::Find(Value v) const {
  auto it = index.find(v);
  return it == index.end() ? nullptr : &buffers[it->second];
}

namespace {

// Every output of every node as a buffer with its class, its liveness and no place yet.
absl::StatusOr<MemoryPlan> Buffers(const Graph& graph, absl::Span<const ScheduledLaunch> schedule,
                                   absl::Span<const Value> kept) {
  const absl::flat_hash_set<Value> kept_set(kept.begin(), kept.end());
  std::vector<int> position(graph.num_nodes(), -1);
  for (int i = 0; i < static_cast<int>(schedule.size()); ++i) position[schedule[i].node] = i;
  const int end = static_cast<int>(schedule.size());
  MemoryPlan plan;
  for (const Node& node : graph.nodes()) {
    if (!ir::IsLeaf(node) && position[node.id] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' is not scheduled"));
    }
    for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
      const Value v{node.id, out};
      Buffer b{v, ClassOf(node, kept_set.contains(v)), 0, node.outputs[out].bytes(), 0, end};
      if (b.cls == BufferClass::kActivation) {
        b.first = b.last = position[node.id];
        b.uses = {position[node.id]};
      }
      plan.index[v] = static_cast<int>(plan.buffers.size());
      plan.buffers.push_back(b);
    }
  }
  for (const Node& node : graph.nodes()) {
    for (const Value& v : node.inputs) {
      Buffer& b = plan.buffers[plan.index[v]];
      if (b.cls == BufferClass::kActivation) {
        b.last = std::max(b.last, position[node.id]);
        b.uses.push_back(position[node.id]);
      }
    }
  }
  return plan;
}

}  // namespace

absl::StatusOr<int64_t> LiveTransientBytes(const Graph& graph,
                                           absl::Span<const ScheduledLaunch> schedule,
                                           absl::Span<const Value> kept) {
  ASSIGN_OR_RETURN(const MemoryPlan plan, Buffers(graph, schedule, kept));
  std::vector<int64_t> change(schedule.size() + 1, 0);  // Bytes allocated (+), freed (-) there.
  for (const Buffer& b : plan.buffers) {
    if (b.cls != BufferClass::kActivation) continue;
    change[b.first] += AlignedSize(b);
    change[b.last + 1] -= AlignedSize(b);
  }
  int64_t live = 0, peak = 0;
  for (int64_t bytes : change) peak = std::max(peak, live += bytes);
  return peak;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph,
                                      absl::Span<const ScheduledLaunch> schedule,
                                      absl::Span<const Value> kept) {
  ASSIGN_OR_RETURN(MemoryPlan plan, Buffers(graph, schedule, kept));

  // Persistent classes first, then the input region, then the transient region.
  int64_t cursor = 0;
  for (BufferClass cls : {BufferClass::kParameter, BufferClass::kOptimizerState,
                          BufferClass::kConstant, BufferClass::kFetched, BufferClass::kInput}) {
    if (cls == BufferClass::kInput) plan.input_offset = cursor;
    for (Buffer& b : plan.buffers) {
      if (b.cls != cls) continue;
      b.offset = cursor;
      cursor += AlignUp(b.bytes);
      plan.bytes_by_class[cls] += b.bytes;
    }
  }
  plan.input_bytes = cursor - plan.input_offset;
  plan.transient_offset = cursor;

  std::vector<int> transient;
  for (int i = 0; i < static_cast<int>(plan.buffers.size()); ++i) {
    if (plan.buffers[i].cls == BufferClass::kActivation) transient.push_back(i);
  }
  const HappensBefore happens_before(schedule);
  // Two transient buffers may share bytes when every use of one happens before the other is
  // written.
  auto dead_before = [&](const Buffer& b, int launch) {
    for (int use : b.uses) {
      if (!happens_before(use, launch)) return false;
    }
    return true;
  };
  bool one_lane = true;
  for (const ScheduledLaunch& launch : schedule) one_lane = one_lane && launch.lane == 0;
  auto apart = [&](const Buffer& a, const Buffer& b) {
    if (a.first <= b.last && b.first <= a.last) return false;  // Both alive at one launch.
    if (one_lane) return true;  // In order: disjoint intervals never meet.
    return dead_before(a, b.first) || dead_before(b, a.first);
  };
  // First fit in `order`; returns the offsets (within the transient region) and the peak.
  auto place = [&](const std::vector<int>& order) {
    std::vector<int64_t> offsets(plan.buffers.size(), 0);
    int64_t peak = 0;
    std::vector<int> placed;
    std::vector<std::pair<int64_t, int64_t>> live;  // (offset, aligned size) in the region
    for (int i : order) {
      const Buffer& b = plan.buffers[i];
      live.clear();
      for (int j : placed) {
        if (!apart(plan.buffers[j], b)) live.emplace_back(offsets[j], AlignedSize(plan.buffers[j]));
      }
      std::sort(live.begin(), live.end());
      const int64_t size = AlignedSize(b);
      offsets[i] = FirstFit(live, size);
      peak = std::max(peak, offsets[i] + size);
      placed.push_back(i);
    }
    return std::make_pair(std::move(offsets), peak);
  };
  // Two orders, keeping the smaller peak: by first use (buffers fill the holes of earlier dead
  // ones as they come), and largest first (big buffers are laid out before small ones can
  // fragment the space between them: what a step whose backward recomputes values needs).
  std::vector<int> by_first = transient, by_size = transient;
  std::stable_sort(by_first.begin(), by_first.end(),
                   [&](int a, int b) { return plan.buffers[a].first < plan.buffers[b].first; });
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return plan.buffers[a].bytes > plan.buffers[b].bytes; });
  auto [offsets, peak] = place(by_first);
  if (auto [size_offsets, size_peak] = place(by_size); size_peak < peak) {
    offsets = std::move(size_offsets);
    peak = size_peak;
  }
  for (int i : transient) plan.buffers[i].offset = plan.transient_offset + offsets[i];
  plan.transient_peak = peak;
  plan.bytes_by_class[BufferClass::kActivation] = plan.transient_peak;
  plan.arena_bytes = plan.transient_offset + plan.transient_peak;
  return plan;
}

}  // namespace reprise::passes
