#include "src/passes/batch_ensemble.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/ir/initializer.h"
#include "src/ops/batched.h"
#include "src/ops/ops.h"
#include "src/passes/ensemble_match.h"
#include "src/passes/rewrite.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

absl::StatusOr<ModelValue> BatchedGraph::Map(Value old) const {
  if (auto it = values.find(old); it != values.end()) return it->second;
  if (groups.empty()) {  // Nothing was batched: every value of the original graph is mapped.
    return absl::InvalidArgumentError(
        absl::StrCat("output ", old.output, " of node ", old.node,
                     " is not a value of the graph the trainer was created with"));
  }
  return absl::NotFoundError(absl::StrCat(
      "output ", old.output, " of node ", old.node,
      " has no value in the batched graph: it is not a value of the graph the trainer was "
      "created with, or it is an add of the models' losses, now summed in one model_sum (read "
      "the total, or each model's loss)"));
}

namespace {

TensorSpec Stacked(int64_t models, const TensorSpec& spec) {
  std::vector<int64_t> dims = {models};
  dims.insert(dims.end(), spec.shape.dims().begin(), spec.shape.dims().end());
  return {Shape(std::move(dims)), spec.dtype};
}

// "<common prefix>*<common suffix>" of the names: "m*.fc0.weight" for "m0.fc0.weight", ...
// One name stands for itself.
std::string Pattern(const std::vector<std::string>& names) {
  if (names.size() == 1) return names[0];
  size_t prefix = names[0].size(), suffix = names[0].size(), shortest = names[0].size();
  for (const std::string& name : names) {
    shortest = std::min(shortest, name.size());
    size_t p = 0;
    while (p < prefix && p < name.size() && name[p] == names[0][p]) ++p;
    prefix = p;
    size_t s = 0;
    while (s < suffix && s < name.size() &&
           name[name.size() - 1 - s] == names[0][names[0].size() - 1 - s]) {
      ++s;
    }
    suffix = s;
  }
  prefix = std::min(prefix, shortest);
  suffix = std::min(suffix, shortest - prefix);
  return absl::StrCat(names[0].substr(0, prefix), "*", names[0].substr(names[0].size() - suffix));
}

class Rewriter {
 public:
  Rewriter(const Graph& old, ensemble::Matches matches) : old_(old), matches_(std::move(matches)) {
    out_.graph.ShareIdentityWith(old);
    for (const Node& node : old.nodes()) names_.insert(node.name);
    for (size_t g = 0; g < matches_.groups.size(); ++g) {
      const ensemble::Match& match = matches_.groups[g];
      const absl::flat_hash_set<int32_t> shared(match.shared_leaves.begin(),
                                                match.shared_leaves.end());
      for (size_t k = 0; k < match.nodes.size(); ++k) {
        for (const auto& [tmpl, id] : match.nodes[k]) {
          if (!shared.contains(tmpl)) {
            member_of_[id] = {static_cast<int>(g), static_cast<int64_t>(k), tmpl};
          }
        }
      }
    }
    for (size_t t = 0; t < matches_.trees.size(); ++t) {
      for (int32_t add : matches_.trees[t].adds) tree_of_[add] = static_cast<int>(t);
    }
  }

  absl::Status Run() {
    // Leaves first (as ReplaceGroups does), stacked ones where their model-0 member was.
    for (const Node& node : old_.nodes()) {
      if (!ir::IsLeaf(node)) continue;
      auto it = member_of_.find(node.id);
      if (it == member_of_.end()) {
        ASSIGN_OR_RETURN(const Value v, CopyLeaf(out_.graph, node));
        out_.values[Value{node.id, 0}] = {v, -1};
        node_ids_[node.id] = v.node;
        continue;
      }
      if (it->second.model == 0) RETURN_IF_ERROR(AddStackedLeaf(it->second.group, node.id));
    }
    for (const Node& node : old_.nodes()) {
      if (ir::IsLeaf(node)) continue;
      if (auto it = member_of_.find(node.id); it != member_of_.end()) {
        if (it->second.model == 0) RETURN_IF_ERROR(AddBatchedOp(it->second.group, node.id));
        continue;
      }
      if (auto it = tree_of_.find(node.id); it != tree_of_.end()) {
        if (matches_.trees[it->second].root == node.id) RETURN_IF_ERROR(AddSum(it->second));
        continue;
      }
      RETURN_IF_ERROR(CopyOp(node));
    }
    for (const ensemble::Match& match : matches_.groups) {
      EnsembleGroup group{.models = static_cast<int64_t>(match.roots.size()),
                          .nodes_per_model = static_cast<int>(match.template_ops.size())};
      for (int32_t root : match.roots) group.roots.push_back(old_.node(root).name);
      out_.groups.push_back(std::move(group));
    }
    out_.declined = std::move(matches_.declined);
    return absl::OkStatus();
  }

  BatchedGraph Finish() && { return std::move(out_); }

 private:
  struct Membership {
    int group;
    int64_t model;
    int32_t template_node;
  };

  std::string UniqueName(const std::vector<std::string>& names) {
    const std::string base = Pattern(names);
    std::string name = base;
    for (int i = 2; names_.contains(name); ++i) name = absl::StrCat(base, "#", i);
    names_.insert(name);
    return name;
  }

  // The old node of model k standing for template node `tmpl` of group g.
  int32_t NodeOf(int group, int64_t k, int32_t tmpl) const {
    return matches_.groups[group].nodes[k].at(tmpl);
  }

  std::vector<std::string> MemberNames(int group, int32_t tmpl) const {
    std::vector<std::string> names;
    const ensemble::Match& match = matches_.groups[group];
    for (size_t k = 0; k < match.nodes.size(); ++k)
      names.push_back(old_.node(NodeOf(group, k, tmpl)).name);
    return names;
  }

  absl::Status AddStackedLeaf(int group, int32_t tmpl) {
    const Node& node = old_.node(tmpl);
    const int64_t models = static_cast<int64_t>(matches_.groups[group].roots.size());
    StackedLeaf leaf{.name = UniqueName(MemberNames(group, tmpl))};
    for (int64_t k = 0; k < models; ++k) {
      const Node& member = old_.node(NodeOf(group, k, tmpl));
      leaf.members.push_back({member.name, member.init});
    }
    const TensorSpec spec = Stacked(models, node.outputs[0]);
    Graph& g = out_.graph;
    absl::StatusOr<Value> v = node.op == &ir::InputOp() ? g.AddInput(leaf.name, spec, node.init)
                              : node.op == &ir::ParameterOp()
                                  ? g.AddParameter(leaf.name, spec, node.init)
                                  : g.AddConstant(leaf.name, spec, node.init);
    RETURN_IF_ERROR(v.status());
    for (int64_t k = 0; k < models; ++k) out_.values[Value{NodeOf(group, k, tmpl), 0}] = {*v, k};
    out_.stacked.push_back(std::move(leaf));
    return absl::OkStatus();
  }

  // The new value for an input of a template node: the whole stacked value.
  absl::StatusOr<Value> Whole(Value old) const {
    auto it = out_.values.find(old);
    if (it == out_.values.end() || it->second.model > 0) {
      return absl::InternalError(absl::StrCat("ensemble batching: '", old_.node(old.node).name,
                                              "' is read before it is made"));
    }
    return it->second.value;
  }

  // A leaf every model of `group` reads, repeated for each model: [K, ...] (made once).
  absl::StatusOr<Value> Tiled(int group, Value leaf) {
    auto key = std::make_pair(group, leaf.node);
    if (auto it = tiled_.find(key); it != tiled_.end()) return it->second;
    ASSIGN_OR_RETURN(const Value whole, Whole(leaf));
    const int64_t models = static_cast<int64_t>(matches_.groups[group].roots.size());
    ASSIGN_OR_RETURN(
        const Value tiled,
        out_.graph.AddOp1(ops::ModelTileOp(),
                          UniqueName({absl::StrCat(old_.node(leaf.node).name, ".tiled")}), {whole},
                          {{"models", models}}));
    tiled_[key] = tiled;
    return tiled;
  }

  absl::Status AddBatchedOp(int group, int32_t tmpl) {
    const Node& node = old_.node(tmpl);
    const std::vector<int32_t>& shared = matches_.groups[group].shared_leaves;
    std::vector<Value> inputs;
    for (const Value& v : node.inputs) {
      const bool is_shared = std::binary_search(shared.begin(), shared.end(), v.node);
      ASSIGN_OR_RETURN(const Value mapped, is_shared ? Tiled(group, v) : Whole(v));
      inputs.push_back(mapped);
    }
    const ir::OpDef* op = ensemble::BatchedOpOf(node);
    if (op == nullptr) return absl::InternalError(absl::StrCat("'", node.name, "' cannot batch"));
    ASSIGN_OR_RETURN(
        const std::vector<Value> outputs,
        out_.graph.AddOp(*op, UniqueName(MemberNames(group, tmpl)), inputs, node.attrs));
    const int64_t models = static_cast<int64_t>(matches_.groups[group].roots.size());
    for (int64_t k = 0; k < models; ++k) {
      for (size_t o = 0; o < outputs.size(); ++o) {
        out_.values[Value{NodeOf(group, k, tmpl), static_cast<int32_t>(o)}] = {outputs[o], k};
      }
    }
    return absl::OkStatus();
  }

  // A sum of the models' losses: one model_sum per group whose roots it adds, where the group's
  // first root was among the summed values, and the other values in their order.
  absl::Status AddSum(int t) {
    const ensemble::SumTree& tree = matches_.trees[t];
    const std::string& name = old_.node(tree.root).name;
    std::vector<Value> parts;
    absl::flat_hash_set<int> summed;
    for (const Value& leaf : tree.leaves) {
      auto it = out_.values.find(leaf);
      if (it == out_.values.end()) {
        return absl::InternalError(
            absl::StrCat("ensemble batching: a value summed by '", name, "' is not made yet"));
      }
      if (it->second.model < 0) {
        parts.push_back(it->second.value);
        continue;
      }
      const int group = member_of_.at(leaf.node).group;
      if (!summed.insert(group).second) continue;
      const bool last = parts.empty() && tree.leaves.size() == matches_.groups[group].roots.size();
      ASSIGN_OR_RETURN(
          const Value sum,
          out_.graph.AddOp1(ops::ModelSumOp(),
                            last ? name
                                 : UniqueName({absl::StrCat(
                                       out_.graph.node(it->second.value.node).name, ".sum")}),
                            {it->second.value}));
      parts.push_back(sum);
    }
    Value total = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string add_name =
          i + 1 == parts.size() ? name : UniqueName({absl::StrCat(name, ".part", i)});
      ASSIGN_OR_RETURN(total, out_.graph.AddOp1(ops::AddOp(), add_name, {total, parts[i]}));
    }
    out_.values[Value{tree.root, 0}] = {total, -1};
    return absl::OkStatus();
  }

  absl::Status CopyOp(const Node& node) {
    std::vector<Value> inputs;
    for (const Value& v : node.inputs) {
      auto it = out_.values.find(v);
      if (it == out_.values.end() || it->second.model >= 0) {
        return absl::InternalError(
            absl::StrCat("ensemble batching: '", node.name, "' reads a value that is not whole"));
      }
      inputs.push_back(it->second.value);
    }
    ASSIGN_OR_RETURN(const std::vector<Value> outputs,
                     out_.graph.AddOp(*node.op, node.name, inputs, node.attrs));
    const int32_t id = out_.graph.num_nodes() - 1;
    node_ids_[node.id] = id;
    for (int32_t before : node.control_inputs) {
      auto it = node_ids_.find(before);
      if (it == node_ids_.end()) {
        return absl::InternalError(
            absl::StrCat("ensemble batching: '", node.name, "' waits on a node that was batched"));
      }
      RETURN_IF_ERROR(out_.graph.AddControlEdge(it->second, id));
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      out_.values[Value{node.id, static_cast<int32_t>(o)}] = {outputs[o], -1};
    }
    return absl::OkStatus();
  }

  const Graph& old_;
  ensemble::Matches matches_;
  BatchedGraph out_;
  absl::flat_hash_set<std::string> names_;
  absl::flat_hash_map<int32_t, Membership> member_of_;
  absl::flat_hash_map<int32_t, int> tree_of_;
  absl::flat_hash_map<std::pair<int, int32_t>, Value> tiled_;  // (group, shared leaf) -> tiled.
  absl::flat_hash_map<int32_t, int32_t> node_ids_;             // Copied nodes: old id -> new id.
};

BatchedGraph Unchanged(const Graph& graph, Value loss, absl::Span<const Value> keep) {
  BatchedGraph out{.graph = graph, .loss = loss, .kept = {keep.begin(), keep.end()}};
  for (const Node& node : graph.nodes()) {
    for (int32_t i = 0; i < static_cast<int32_t>(node.outputs.size()); ++i) {
      out.values[Value{node.id, i}] = {Value{node.id, i}, -1};
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<BatchedGraph> BatchEnsembles(const Graph& graph, Value loss,
                                            absl::Span<const Value> keep,
                                            const EnsembleOptions& options) {
  std::vector<Value> kept = {loss};
  kept.insert(kept.end(), keep.begin(), keep.end());
  ASSIGN_OR_RETURN(ensemble::Matches matches,
                   ensemble::FindEnsembles(graph, loss, kept, options.min_models));
  if (matches.groups.empty()) {
    BatchedGraph out = Unchanged(graph, loss, keep);
    out.declined = std::move(matches.declined);
    return out;
  }
  Rewriter rewriter(graph, std::move(matches));
  RETURN_IF_ERROR(rewriter.Run());
  BatchedGraph out = std::move(rewriter).Finish();
  ASSIGN_OR_RETURN(const ModelValue new_loss, out.Map(loss));
  if (new_loss.model >= 0) return absl::InternalError("ensemble batching: the loss is a slice");
  out.loss = new_loss.value;
  for (const Value& v : keep) {
    ASSIGN_OR_RETURN(const ModelValue mapped, out.Map(v));
    out.kept.push_back(mapped.value);
  }
  return out;
}

ir::HostTensor InitialStackedValue(const StackedLeaf& leaf, const TensorSpec& spec, uint64_t seed) {
  ir::HostTensor stacked(spec);
  const int64_t models = spec.shape.dim(0);
  std::vector<int64_t> dims(spec.shape.dims().begin() + 1, spec.shape.dims().end());
  const TensorSpec slice_spec{Shape(std::move(dims)), spec.dtype};
  const int64_t slice_bytes = slice_spec.bytes();
  for (int64_t k = 0; k < models && k < static_cast<int64_t>(leaf.members.size()); ++k) {
    ir::HostTensor slice(slice_spec);
    ir::FillInitial(leaf.members[k].init, seed, leaf.members[k].name, slice);
    std::memcpy(static_cast<char*>(stacked.raw()) + k * slice_bytes, slice.raw(), slice_bytes);
  }
  return stacked;
}

std::vector<ModelTensor> ModelTensorNames(const Graph& graph, const BatchedGraph& batched) {
  absl::flat_hash_map<std::string, const StackedLeaf*> by_name;
  for (const StackedLeaf& leaf : batched.stacked) by_name[leaf.name] = &leaf;
  std::vector<ModelTensor> names;
  for (const Node& node : graph.nodes()) {
    if (!ir::IsLeaf(node)) continue;
    const StackedLeaf* leaf = nullptr;
    std::string suffix;
    if (auto it = by_name.find(node.name); it != by_name.end()) {
      leaf = it->second;
    } else if (node.op == &ir::ParameterOp() || node.op == &ir::StateOp()) {
      // Optimizer state of a stacked parameter: "<stacked>.<suffix>", of the same shape.
      for (size_t dot = node.name.find('.'); dot != std::string::npos;
           dot = node.name.find('.', dot + 1)) {
        auto it2 = by_name.find(node.name.substr(0, dot));
        if (it2 == by_name.end()) continue;
        absl::StatusOr<int32_t> id = graph.FindNode(it2->first);
        if (id.ok() && graph.node(*id).outputs[0].shape == node.outputs[0].shape) {
          leaf = it2->second;
          suffix = node.name.substr(dot);
        }
      }
    }
    if (leaf == nullptr) continue;
    for (size_t k = 0; k < leaf->members.size(); ++k) {
      names.push_back(
          {absl::StrCat(leaf->members[k].name, suffix), node.name, static_cast<int64_t>(k)});
    }
  }
  return names;
}

}  // namespace reprise::passes
