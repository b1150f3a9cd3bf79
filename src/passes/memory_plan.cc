#include "src/passes/memory_plan.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/cast.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

int64_t AlignUp(int64_t x) {
  return (x + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

BufferClass ClassOf(const Node& node, bool kept, bool copy) {
  if (node.op == &ir::ParameterOp()) return BufferClass::kParameter;
  if (copy) return BufferClass::kParameterCopy;
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

// Whether no launch uses both.
bool Disjoint(const Buffer& a, const Buffer& b) { return a.last < b.first || b.last < a.first; }

// A launch waits for another lane's launch so that its output may take the place of a value that
// launch read only when the reader was scheduled at least this many launches earlier: by then it
// has almost always finished, so the wait costs nothing. (Closer waits cost time: any distance on
// lane 0 made ResNet-50 b64's step 0.8 ms slower, and a downsample branch on lane 2 waiting for
// lane 0 a few launches back held lane 0 up 0.6 ms in the forward pass, H200.)
constexpr int kReuseWaitDistance = 8;

// Launch `waits_for` must finish before launch `launch` starts.
struct ReuseWait {
  int launch = -1;
  int waits_for = -1;
};

}  // namespace

absl::string_view BufferClassName(BufferClass c) {
  switch (c) {
    case BufferClass::kParameter:
      return "parameter";
    case BufferClass::kOptimizerState:
      return "optimizer_state";
    case BufferClass::kParameterCopy:
      return "parameter_copy";
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

bool MemoryPlan::SharePlace(const Buffer& a, const Buffer& b) const {
  auto root = [&](const Buffer* x) {
    while (x->overwrites >= 0) x = &buffers[x->overwrites];
    return x;
  };
  return root(&a) == root(&b);
}

namespace {

// Every output of every node as a buffer with its class, its liveness and no place yet.
absl::StatusOr<MemoryPlan> Buffers(const Graph& graph, absl::Span<const ScheduledLaunch> schedule,
                                   absl::Span<const Value> kept) {
  const absl::flat_hash_set<Value> kept_set(kept.begin(), kept.end());
  absl::flat_hash_set<int32_t> copies;  // The state refresh_copies writes.
  for (const Node& node : graph.nodes()) {
    if (node.op != &ops::RefreshCopiesOp()) continue;
    for (int m : ir::MutatedInputs(node)) copies.insert(node.inputs[m].node);
  }
  std::vector<int> position(graph.num_nodes(), -1);
  for (int i = 0; i < static_cast<int>(schedule.size()); ++i) position[schedule[i].node] = i;
  const int end = static_cast<int>(schedule.size());
  MemoryPlan plan;
  // Every offset and peak below is at most the sum of the aligned sizes of all buffers, so once
  // that sum fits in int64 the layout's arithmetic cannot wrap.
  int64_t total = 0;
  for (const Node& node : graph.nodes()) {
    for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
      absl::StatusOr<int64_t> bytes = node.outputs[out].CheckedBytes();
      std::optional<int64_t> aligned =
          bytes.ok() ? CheckedAlignUp(std::max<int64_t>(*bytes, 1), kBufferAlignment)
                     : std::nullopt;
      std::optional<int64_t> sum = aligned.has_value() ? CheckedAdd(total, *aligned) : std::nullopt;
      if (!sum.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "memory plan: output ", out, " of node '", node.name, "' (",
            node.outputs[out].ToString(), ") takes the buffers past what int64 bytes can count"));
      }
      total = *sum;
    }
  }
  for (const Node& node : graph.nodes()) {
    if (!ir::IsLeaf(node) && position[node.id] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' is not scheduled"));
    }
    for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
      const Value v{node.id, out};
      Buffer b{v, ClassOf(node, kept_set.contains(v), copies.contains(node.id)),
               0, node.outputs[out].bytes(),
               0, end};
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
  for (const Node& node : graph.nodes()) {
    const int k = node.op->output_overwrites_input;
    if (k < 0) continue;
    const int over = plan.index.at(node.inputs.at(k)), out = plan.index.at(Value{node.id, 0});
    if (plan.buffers[over].cls != BufferClass::kActivation ||
        plan.buffers[out].cls != BufferClass::kActivation) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", node.name, "' writes its output over input ", k, " ('",
                       graph.node(node.inputs[k].node).name,
                       "'), but only a transient value not kept after "
                       "the step can be written over"));
    }
    plan.buffers[out].overwrites = over;
  }
  return plan;
}

// Each buffer's root: the buffer it is written over, followed to the end (itself if none).
std::vector<int> OverwriteRoots(const MemoryPlan& plan) {
  std::vector<int> root(plan.buffers.size());
  for (int i = 0; i < static_cast<int>(root.size()); ++i) {
    int r = i;
    while (plan.buffers[r].overwrites >= 0) r = plan.buffers[r].overwrites;
    root[i] = r;
  }
  return root;
}

// A communication op's inputs, and likewise its outputs, sit side by side in node order, so one
// collective covers them all (src/ops/all_reduce.h): lists of buffer indices. Each must be a
// transient buffer of no other such list.
absl::StatusOr<std::vector<std::vector<int>>> ContiguousGroups(const Graph& graph,
                                                               const MemoryPlan& plan) {
  std::vector<std::vector<int>> groups;
  absl::flat_hash_set<int> grouped;
  for (const Node& node : graph.nodes()) {
    if (node.op->kind != ir::OpKind::kCommunication) continue;
    for (const bool outputs : {false, true}) {
      std::vector<int> group;
      const int count = static_cast<int>(outputs ? node.outputs.size() : node.inputs.size());
      for (int i = 0; i < count; ++i) {
        const Value v = outputs ? Value{node.id, i} : node.inputs[i];
        const int b = plan.index.at(v);
        if (plan.buffers[b].cls != BufferClass::kActivation || !grouped.insert(b).second) {
          return absl::InvalidArgumentError(absl::StrCat(
              "node '", node.name, "': ", outputs ? "output " : "input ", i, " ('",
              graph.node(v.node).name, "') cannot sit beside the others in the arena: it is ",
              plan.buffers[b].cls != BufferClass::kActivation
                  ? absl::StrCat("a ", BufferClassName(plan.buffers[b].cls), " tensor")
                  : "in another collective already"));
        }
        group.push_back(b);
      }
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

}  // namespace

absl::StatusOr<int64_t> LiveTransientBytes(const Graph& graph,
                                           absl::Span<const ScheduledLaunch> schedule,
                                           absl::Span<const Value> kept) {
  ASSIGN_OR_RETURN(MemoryPlan plan, Buffers(graph, schedule, kept));
  // A buffer written over another one lives in its place: one interval for both.
  const std::vector<int> root = OverwriteRoots(plan);
  for (int i = 0; i < static_cast<int>(root.size()); ++i) {
    if (root[i] == i) continue;
    Buffer& r = plan.buffers[root[i]];
    r.first = std::min(r.first, plan.buffers[i].first);
    r.last = std::max(r.last, plan.buffers[i].last);
  }
  std::vector<int64_t> change(schedule.size() + 1, 0);  // Bytes allocated (+), freed (-) there.
  for (int i = 0; i < static_cast<int>(plan.buffers.size()); ++i) {
    const Buffer& b = plan.buffers[i];
    if (b.cls != BufferClass::kActivation || root[i] != i) continue;
    change[b.first] += AlignedSize(b);
    change[b.last + 1] -= AlignedSize(b);
  }
  int64_t live = 0, peak = 0;
  for (int64_t bytes : change) peak = std::max(peak, live += bytes);
  return peak;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, absl::Span<ScheduledLaunch> schedule,
                                      absl::Span<const Value> kept) {
  ASSIGN_OR_RETURN(MemoryPlan plan, Buffers(graph, schedule, kept));

  // Persistent classes first, then the input region, then the transient region.
  int64_t cursor = 0;
  for (BufferClass cls :
       {BufferClass::kParameter, BufferClass::kOptimizerState, BufferClass::kParameterCopy,
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

  // What the first fit places: a transient buffer alone, or a contiguous group as one block whose
  // liveness is its members' together.
  struct Unit {
    std::vector<int> members;  // Buffer indices, in their order in the block.
    Buffer block;
    std::vector<int> writes;  // The launches that write it: each member's producer.
    bool shared = false;      // The members share one place (written over one another).
  };
  ASSIGN_OR_RETURN(const std::vector<std::vector<int>> groups, ContiguousGroups(graph, plan));
  std::vector<int> group_of(plan.buffers.size(), -1);
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    for (int b : groups[g]) group_of[b] = g;
  }
  const HappensBefore happens_before(schedule);
  // Buffers written over others: one shared place per root, after checking that whatever else
  // reads the overwritten value has run by then.
  const std::vector<int> root = OverwriteRoots(plan);
  absl::flat_hash_map<int, std::vector<int>> sharing;  // Root -> the buffers written over it.
  for (int i = 0; i < static_cast<int>(plan.buffers.size()); ++i) {
    const int over = plan.buffers[i].overwrites;
    if (over < 0) continue;
    const Buffer& out = plan.buffers[i];
    const Node& writer = graph.node(out.value.node);
    if (group_of[i] >= 0 || group_of[over] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", writer.name, "' writes over a value that a collective also places"));
    }
    for (int use : plan.buffers[over].uses) {
      if (use != out.first && !happens_before(use, out.first)) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", writer.name, "' writes over '",
                         graph.node(plan.buffers[over].value.node).name, "', which launch ", use,
                         " may still read"));
      }
    }
    sharing[root[i]].push_back(i);
  }
  std::vector<Unit> units;
  for (int i = 0; i < static_cast<int>(plan.buffers.size()); ++i) {
    if (plan.buffers[i].cls != BufferClass::kActivation || root[i] != i) continue;
    if (auto it = sharing.find(i); it != sharing.end()) {
      Unit unit{{i}, plan.buffers[i], {plan.buffers[i].first}, /*shared=*/true};
      for (int b : it->second) {
        const Buffer& m = plan.buffers[b];
        unit.members.push_back(b);
        unit.block.bytes = std::max(unit.block.bytes, m.bytes);
        unit.block.first = std::min(unit.block.first, m.first);
        unit.block.last = std::max(unit.block.last, m.last);
        unit.block.uses.insert(unit.block.uses.end(), m.uses.begin(), m.uses.end());
        unit.writes.push_back(m.first);
      }
      units.push_back(std::move(unit));
      continue;
    }
    if (group_of[i] < 0) {
      units.push_back({{i}, plan.buffers[i], {plan.buffers[i].first}});
      continue;
    }
    const std::vector<int>& group = groups[group_of[i]];
    // The block goes where its lowest-numbered buffer would have gone.
    if (*std::min_element(group.begin(), group.end()) != i) continue;
    Unit unit{group, plan.buffers[i], {}};
    unit.block.bytes = 0;
    unit.block.uses.clear();
    for (int b : unit.members) {
      const Buffer& m = plan.buffers[b];
      unit.block.bytes += AlignedSize(m);
      unit.block.first = std::min(unit.block.first, m.first);
      unit.block.last = std::max(unit.block.last, m.last);
      unit.block.uses.insert(unit.block.uses.end(), m.uses.begin(), m.uses.end());
      unit.writes.push_back(m.first);
    }
    units.push_back(std::move(unit));
  }
  std::vector<int> transient;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) transient.push_back(u);
  bool one_lane = true;
  int lanes = 1, communication_lane = -1;
  for (const ScheduledLaunch& launch : schedule) {
    one_lane = one_lane && launch.lane == 0;
    lanes = std::max(lanes, launch.lane + 1);
    if (graph.node(launch.node).op->kind == ir::OpKind::kCommunication) {
      communication_lane = launch.lane;
    }
  }
  // The waits that let `a` and `b` share bytes although, as scheduled, a lane may still read the
  // earlier of the two when the other is written: for each write of the later one, the last use
  // on each lane not known to have finished. None when both are alive at one launch, when a
  // launch would wait for a reader fewer than kReuseWaitDistance launches before it, or when
  // either is on the communication lane (the backward pass never waits for collectives, and a
  // collective held up by a compute launch would start late).
  auto waits_to_separate =
      [&](const Unit& a, const Unit& b, absl::Span<const ScheduledLaunch> order,
          const HappensBefore& happens_before) -> std::optional<std::vector<ReuseWait>> {
    if (!Disjoint(a.block, b.block)) return std::nullopt;
    const Unit& earlier = a.block.last < b.block.first ? a : b;
    const Unit& later = &earlier == &a ? b : a;
    std::vector<ReuseWait> waits;
    std::vector<int> last_use(lanes);
    for (int write : later.writes) {
      std::fill(last_use.begin(), last_use.end(), -1);
      for (int use : earlier.block.uses) {
        if (happens_before(use, write)) continue;
        last_use[order[use].lane] = std::max(last_use[order[use].lane], use);
      }
      for (int use : last_use) {
        if (use < 0) continue;
        if (write - use < kReuseWaitDistance) return std::nullopt;
        if (order[use].lane == communication_lane || order[write].lane == communication_lane) {
          return std::nullopt;
        }
        waits.push_back({write, use});
      }
    }
    return waits;
  };
  // First fit in `order`; returns the offsets (within the transient region), the peak and the
  // waits it added (each launch's, in `waits`).
  struct Layout {
    std::vector<int64_t> offsets;
    int64_t peak = 0;
    std::vector<std::vector<int>> waits;
  };
  auto place = [&](const std::vector<int>& order) {
    Layout layout{std::vector<int64_t>(units.size(), 0), 0, {}};
    std::vector<ScheduledLaunch> working(schedule.begin(), schedule.end());
    HappensBefore happens_before(working);
    // Two transient buffers may share bytes when every use of one happens before the other is
    // written (a block: before each of its writes).
    auto dead_before = [&](const Unit& a, const Unit& b) {
      for (int use : a.block.uses) {
        for (int write : b.writes) {
          if (!happens_before(use, write)) return false;
        }
      }
      return true;
    };
    auto apart = [&](const Unit& a, const Unit& b) {
      if (!Disjoint(a.block, b.block)) return false;  // Both alive at one launch.
      if (one_lane) return true;                      // In order: disjoint intervals never meet.
      return dead_before(a, b) || dead_before(b, a);
    };
    std::vector<int> placed;
    std::vector<std::pair<int64_t, int64_t>> live;  // (offset, aligned size) in the region
    std::vector<std::pair<int, std::vector<ReuseWait>>> separable;
    for (int i : order) {
      live.clear();
      separable.clear();
      for (int j : placed) {
        if (apart(units[j], units[i])) continue;
        if (auto waits = waits_to_separate(units[j], units[i], working, happens_before);
            waits.has_value()) {
          separable.emplace_back(j, *std::move(waits));
          continue;
        }
        live.emplace_back(layout.offsets[j], AlignedSize(units[j].block));
      }
      std::sort(live.begin(), live.end());
      const int64_t size = AlignedSize(units[i].block);
      int64_t offset = FirstFit(live, size);
      // A wait for another lane is taken only where it lowers the peak: where the block fits
      // below the peak so far without the places of values another lane may still read, it goes
      // there. (GPT-2 124M B=16: 13 such waits held lane 0 up 1.0 ms a step on lane 1's weight
      // gradients for the same peak.)
      if (!separable.empty()) {
        std::vector<std::pair<int64_t, int64_t>> all = live;
        for (const auto& [j, waits] : separable) {
          all.emplace_back(layout.offsets[j], AlignedSize(units[j].block));
        }
        std::sort(all.begin(), all.end());
        if (const int64_t apart_offset = FirstFit(all, size); apart_offset + size <= layout.peak) {
          offset = apart_offset;
          separable.clear();
        }
      }
      layout.offsets[i] = offset;
      layout.peak = std::max(layout.peak, offset + size);
      placed.push_back(i);
      // Where it took the place of a value another lane may still read, that lane's reader
      // must finish first.
      for (const auto& [j, waits] : separable) {
        const int64_t other = layout.offsets[j];
        if (other >= offset + size || offset >= other + AlignedSize(units[j].block)) continue;
        for (const ReuseWait& w : waits) {
          if (happens_before(w.waits_for, w.launch)) continue;
          working[w.launch].waits.push_back(w.waits_for);
          happens_before = HappensBefore(working);
        }
      }
    }
    for (const ScheduledLaunch& launch : working) layout.waits.push_back(launch.waits);
    return layout;
  };
  // Two orders, keeping the smaller peak: by first use (buffers fill the holes of earlier dead
  // ones as they come), and largest first (big buffers are laid out before small ones can
  // fragment the space between them: what a step whose backward recomputes values needs).
  std::vector<int> by_first = transient, by_size = transient;
  std::stable_sort(by_first.begin(), by_first.end(),
                   [&](int a, int b) { return units[a].block.first < units[b].block.first; });
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return units[a].block.bytes > units[b].block.bytes; });
  Layout layout = place(by_first);
  if (Layout by_size_layout = place(by_size); by_size_layout.peak < layout.peak) {
    layout = std::move(by_size_layout);
  }
  for (size_t i = 0; i < schedule.size(); ++i) {
    plan.reuse_waits += static_cast<int>(layout.waits[i].size() - schedule[i].waits.size());
    schedule[i].waits = std::move(layout.waits[i]);
  }
  const std::vector<int64_t>& offsets = layout.offsets;
  const int64_t peak = layout.peak;
  for (int u : transient) {
    int64_t offset = plan.transient_offset + offsets[u];
    for (int b : units[u].members) {
      plan.buffers[b].offset = offset;
      if (!units[u].shared) offset += AlignedSize(plan.buffers[b]);
    }
  }
  plan.transient_peak = peak;
  plan.bytes_by_class[BufferClass::kActivation] = plan.transient_peak;
  plan.arena_bytes = plan.transient_offset + plan.transient_peak;
  return plan;
}

}  // namespace reprise::passes
