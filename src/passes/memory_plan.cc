#include "src/passes/memory_plan.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"

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

// First fit over the gaps between live blocks, sorted by offset.
int64_t FirstFit(const std::map<int64_t, int64_t>& live, int64_t bytes) {
  int64_t cursor = 0;
  for (const auto& [offset, size] : live) {
    if (offset - cursor >= bytes) return cursor;
    cursor = std::max(cursor, offset + size);
  }
  return cursor;
}

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

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph,
                                      absl::Span<const ScheduledLaunch> schedule,
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
  std::stable_sort(transient.begin(), transient.end(),
                   [&](int a, int b) { return plan.buffers[a].first < plan.buffers[b].first; });
  const HappensBefore happens_before(schedule);
  // A placed buffer is free for `launch` once every use of it happens before that launch.
  auto dead_before = [&](const Buffer& b, int launch) {
    for (int use : b.uses) {
      if (!happens_before(use, launch)) return false;
    }
    return true;
  };
  std::vector<int> placed;
  for (int i : transient) {
    Buffer& b = plan.buffers[i];
    // Two buffers may share an offset range (a big one and a small one that reused its head),
    // so keep the largest extent per offset.
    std::map<int64_t, int64_t> live;  // offset -> aligned size, within the transient region
    for (int j : placed) {
      const Buffer& other = plan.buffers[j];
      if (dead_before(other, b.first)) continue;
      int64_t& extent = live[other.offset - plan.transient_offset];
      extent = std::max(extent, AlignUp(std::max<int64_t>(other.bytes, 1)));
    }
    const int64_t size = AlignUp(std::max<int64_t>(b.bytes, 1));
    const int64_t offset = FirstFit(live, size);
    b.offset = plan.transient_offset + offset;
    plan.transient_peak = std::max(plan.transient_peak, offset + size);
    placed.push_back(i);
  }
  plan.bytes_by_class[BufferClass::kActivation] = plan.transient_peak;
  plan.arena_bytes = plan.transient_offset + plan.transient_peak;
  return plan;
}

}  // namespace reprise::passes
