#include "src/passes/mirror.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/passes/mirror_rewrite.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

using NodeSet = absl::flat_hash_set<int32_t>;

struct Candidate {
  int32_t root = -1;
  int64_t saving = 0;  // Live peak bytes it saves on its own.
  int64_t cost = 0;    // Bytes its twins read and write.
};

// Plans candidate graphs and builds groups, over one training graph.
class Search {
 public:
  Search(const autodiff::TrainingGraph& training, absl::Span<const Value> kept,
         const PeakFunction& peak)
      : t_(training), g_(training.graph), kept_(kept.begin(), kept.end()), peak_(peak) {
    read_by_backward_.resize(g_.num_nodes());
    for (int32_t id = t_.forward_nodes; id < g_.num_nodes(); ++id) {
      for (const Value& v : g_.node(id).inputs) {
        if (v.node < t_.forward_nodes) read_by_backward_[v.node].push_back(v.output);
      }
    }
  }

  // Forward nodes whose outputs the backward reads and that could be recomputed, in order.
  std::vector<int32_t> Roots() const {
    std::vector<int32_t> roots;
    for (int32_t id = 0; id < t_.forward_nodes; ++id) {
      const Node& node = g_.node(id);
      if (!Recomputable(node) || HasKeptOutput(node)) continue;
      for (int out : read_by_backward_[id]) {
        if (IsMirroredOutput(node, out)) {
          roots.push_back(id);
          break;
        }
      }
    }
    return roots;
  }

  // `root` and the cheap forward nodes its twin needs that nothing keeps alive for the backward
  // pass (and no chosen twin provides); sorted. Empty if `root` is chosen already.
  std::vector<int32_t> GroupFor(int32_t root, const NodeSet& chosen) const {
    std::vector<int32_t> group, stack = {root};
    NodeSet in_group;
    while (!stack.empty()) {
      const int32_t id = stack.back();
      stack.pop_back();
      if (chosen.contains(id) || !in_group.insert(id).second) continue;
      group.push_back(id);
      for (const Value& v : g_.node(id).inputs) {
        const Node& producer = g_.node(v.node);
        if (ir::IsLeaf(producer) || v.node >= t_.forward_nodes || IsReadByBackward(v) ||
            kept_.contains(v) || !Recomputable(producer)) {
          continue;
        }
        stack.push_back(v.node);
      }
    }
    std::sort(group.begin(), group.end());
    return group;
  }

  // Bytes the twins of `group` read and write: they are memory-bound.
  int64_t CostOf(absl::Span<const int32_t> group) const {
    int64_t bytes = 0;
    for (int32_t id : group) {
      const Node& node = g_.node(id);
      for (const Value& v : node.inputs) bytes = SaturatingAdd(bytes, g_.spec(v).bytes());
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        if (IsMirroredOutput(node, o)) bytes = SaturatingAdd(bytes, node.outputs[o].bytes());
      }
    }
    return bytes;
  }

  // The peaks with `chosen` mirrored; nullopt when those nodes cannot be mirrored together.
  absl::StatusOr<std::optional<PeakEstimate>> PeakOf(const NodeSet& chosen, bool place = false) {
    absl::StatusOr<MirroredGraph> rewritten = RewriteMirrored(t_, chosen);
    if (absl::IsInvalidArgument(rewritten.status())) return std::nullopt;
    RETURN_IF_ERROR(rewritten.status());
    ++evaluations_;
    return peak_(rewritten->training, place);
  }

  // The laid-out peak of a set already known to be mirrorable.
  absl::StatusOr<int64_t> PlannedPeak(const NodeSet& chosen) {
    ASSIGN_OR_RETURN(std::optional<PeakEstimate> p, PeakOf(chosen, /*place=*/true));
    if (!p.has_value()) return absl::InternalError("a mirrored set stopped being mirrorable");
    return p->planned;
  }

  int evaluations() const { return evaluations_; }

 private:
  bool IsReadByBackward(Value v) const {
    const std::vector<int>& outs = read_by_backward_[v.node];
    return std::find(outs.begin(), outs.end(), v.output) != outs.end();
  }
  bool HasKeptOutput(const Node& node) const {
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      if (kept_.contains(Value{node.id, o})) return true;
    }
    return false;
  }

  const autodiff::TrainingGraph& t_;
  const Graph& g_;
  const absl::flat_hash_set<Value> kept_;
  const PeakFunction& peak_;
  std::vector<std::vector<int>> read_by_backward_;  // Forward node -> outputs backward reads.
  int evaluations_ = 0;
};

}  // namespace

absl::StatusOr<int64_t> MirrorFloorBytes(const autodiff::TrainingGraph& training,
                                         absl::Span<const Value> kept) {
  const Graph& g = training.graph;
  const absl::flat_hash_set<Value> kept_set(kept.begin(), kept.end());
  absl::flat_hash_set<Value> counted;
  int64_t bytes = 0;
  for (int32_t id = training.forward_nodes; id < g.num_nodes(); ++id) {
    for (const Value& v : g.node(id).inputs) {
      if (v.node >= training.forward_nodes) continue;
      const Node& producer = g.node(v.node);
      // Leaves and kept values live outside the activations.
      if (ir::IsLeaf(producer) || kept_set.contains(v)) continue;
      const bool freed = Recomputable(producer) && IsMirroredOutput(producer, v.output);
      if (!freed && counted.insert(v).second) {
        const std::optional<int64_t> sum = CheckedAdd(bytes, g.spec(v).bytes());
        if (!sum.has_value()) {
          return absl::InvalidArgumentError(
              absl::StrCat("the forward values that the backward pass reads (up to node '",
                           producer.name, "') take more than an int64 count of bytes"));
        }
        bytes = *sum;
      }
    }
  }
  return bytes;
}

namespace {

NodeSet Without(NodeSet set, absl::Span<const int32_t> group) {
  for (int32_t id : group) set.erase(id);
  return set;
}

}  // namespace

absl::StatusOr<MirroredTraining> Mirror(const autodiff::TrainingGraph& training,
                                        absl::Span<const Value> kept, const MirrorOptions& options,
                                        const PeakFunction& peak) {
  using Policy = MirrorOptions::Policy;
  if (options.policy == Policy::kOff) return MirroredTraining{training, {}};
  if (options.policy == Policy::kBudget && options.budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mirror budget must be a byte count >= 0, got ", options.budget_bytes));
  }
  if (training.forward_nodes <= 0 || training.forward_nodes > training.graph.num_nodes()) {
    return absl::InvalidArgumentError(
        "mirroring needs a training graph that marks its forward nodes (autodiff's)");
  }
  const bool budget = options.policy == Policy::kBudget;
  Search search(training, kept, peak);
  ASSIGN_OR_RETURN(const PeakEstimate unmirrored, peak(training, /*place=*/true));
  auto fits = [&](int64_t planned) { return planned <= options.budget_bytes; };

  NodeSet chosen;
  int64_t live = unmirrored.live;
  int64_t planned = unmirrored.planned;  // Of `chosen`, once a budget is met; else unknown.
  bool met = budget && fits(unmirrored.planned);
  std::vector<std::vector<int32_t>> groups;  // Chosen groups, in the order they were taken.
  if (!met) {
    // Each candidate alone, then the best saving per byte moved first.
    std::vector<Candidate> candidates;
    for (int32_t root : search.Roots()) {
      const std::vector<int32_t> group = search.GroupFor(root, {});
      ASSIGN_OR_RETURN(std::optional<PeakEstimate> p,
                       search.PeakOf(NodeSet(group.begin(), group.end())));
      if (!p.has_value()) continue;
      candidates.push_back({root, live - p->live, std::max<int64_t>(1, search.CostOf(group))});
    }
    std::stable_sort(
        candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
          if ((a.saving > 0) != (b.saving > 0)) return a.saving > 0;
          return static_cast<double>(a.saving) / a.cost > static_cast<double>(b.saving) / b.cost;
        });
    for (const Candidate& c : candidates) {
      if (met) break;
      const std::vector<int32_t> group = search.GroupFor(c.root, chosen);
      if (group.empty()) continue;
      NodeSet trial = chosen;
      trial.insert(group.begin(), group.end());
      ASSIGN_OR_RETURN(std::optional<PeakEstimate> p, search.PeakOf(trial));
      if (!p.has_value() || p->live >= live) continue;  // The benefit test.
      chosen = std::move(trial);
      groups.push_back(group);
      live = p->live;
      if (budget && fits(live)) {  // The layout can only need more than the live bytes.
        ASSIGN_OR_RETURN(planned, search.PlannedPeak(chosen));
        met = fits(planned);
      }
    }
    if (budget && !met) {
      ASSIGN_OR_RETURN(planned, search.PlannedPeak(chosen));
      ASSIGN_OR_RETURN(const int64_t floor, MirrorFloorBytes(training, kept));
      return absl::InvalidArgumentError(
          absl::StrCat("mirror budget ", options.budget_bytes,
                       " bytes is below the smallest activation peak mirroring reaches, ", planned,
                       " bytes (", unmirrored.planned, " bytes without mirroring; ", floor,
                       " bytes that the backward pass reads cannot be recomputed)"));
    }
    // Least recomputation: drop the groups that the result does without, latest first.
    const NodeSet before_pruning = chosen;
    for (int i = static_cast<int>(groups.size()) - 1; i >= 0; --i) {
      NodeSet trial = Without(chosen, groups[i]);
      ASSIGN_OR_RETURN(std::optional<PeakEstimate> p, search.PeakOf(trial));
      if (!p.has_value() || p->live > (budget ? options.budget_bytes : live)) continue;
      chosen = std::move(trial);
      live = p->live;
    }
    ASSIGN_OR_RETURN(planned, search.PlannedPeak(chosen));
    if (budget && !fits(planned)) {  // Pruned too far for the layout: keep what was verified.
      chosen = before_pruning;
      ASSIGN_OR_RETURN(planned, search.PlannedPeak(chosen));
    }
    // Then by the laid-out peak, which the live bytes only bound: a group whose twins merely
    // shift where buffers land (kAuto), or that the budget does without once laid out (kBudget),
    // costs launches for nothing. The live bytes bound the laid-out peak from below, so only a
    // removal that keeps them within the limit is laid out (linear time against quadratic; still
    // about 90 layouts for ResNet-152 b32, 4.6 of its 8.2 s of planning on this machine's CPU).
    for (int i = static_cast<int>(groups.size()) - 1; i >= 0; --i) {
      if (!chosen.contains(groups[i].front())) continue;  // Dropped above.
      const int64_t limit = budget ? options.budget_bytes : planned;
      NodeSet trial = Without(chosen, groups[i]);
      ASSIGN_OR_RETURN(std::optional<PeakEstimate> bound, search.PeakOf(trial));
      if (!bound.has_value() || bound->live > limit) continue;
      ASSIGN_OR_RETURN(const int64_t laid_out, search.PlannedPeak(trial));
      if (laid_out > limit) continue;
      chosen = std::move(trial);
      planned = laid_out;
    }
    if (!budget && planned >= unmirrored.planned) {  // No lower in the end: not worth a launch.
      chosen.clear();
      planned = unmirrored.planned;
    }
  }
  ASSIGN_OR_RETURN(MirroredGraph mirrored, RewriteMirrored(training, chosen));
  MirrorReport report;
  report.peak_unmirrored = unmirrored.planned;
  report.peak = planned;
  report.mirrored = std::move(mirrored.mirrors);
  report.evaluations = search.evaluations() + 1;  // And the unmirrored graph.
  return MirroredTraining{std::move(mirrored.training), std::move(report)};
}

}  // namespace reprise::passes
