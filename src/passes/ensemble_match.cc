#include "src/passes/ensemble_match.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/ops/batched.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::passes::ensemble {
namespace {

// Element-wise: every operand read at the output's own index, one output, no random stream.
bool IsElementwise(const Node& node) {
  const ir::PointwiseForm& form = node.op->pointwise;
  if (node.op->kind != ir::OpKind::kPointwise || form.expression.empty() ||
      form.operands.size() != node.inputs.size() || node.outputs.size() != 1 ||
      node.attrs.contains("seed")) {
    return false;
  }
  for (ir::Operand operand : form.operands) {
    if (operand != ir::Operand::kElement) return false;
  }
  return true;
}

// Inputs and constants may be shared by all the models (the same batch for every model): they
// are read, never written, so each batched op can read them tiled [K, ...].
bool Shareable(const Node& node) {
  return node.op == &ir::InputOp() || node.op == &ir::ConstantOp();
}

bool BatchableLeaf(const Node& node) {
  return node.op == &ir::InputOp() || node.op == &ir::ParameterOp() || node.op == &ir::ConstantOp();
}

std::string AttrsText(const Attrs& attrs) {
  std::string text;
  for (const auto& [key, value] : attrs) {
    absl::StrAppend(&text, key, "=", value.index(), ":");
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) {
            absl::StrAppend(&text, absl::StrFormat("%a", v));
          } else {
            absl::StrAppend(&text, v);
          }
        },
        value);
    text += ';';
  }
  return text;
}

// A structural hash of each node: its op, attributes, output specs and its inputs' hashes, but
// not its name. Equal hashes suggest isomorphic cones; Isomorphic() decides.
std::vector<uint64_t> Signatures(const Graph& g) {
  std::vector<uint64_t> sig(g.num_nodes());
  for (const Node& node : g.nodes()) {
    std::vector<std::string> specs;
    for (const TensorSpec& spec : node.outputs) specs.push_back(spec.ToString());
    std::vector<std::pair<uint64_t, int32_t>> inputs;
    for (const Value& v : node.inputs) inputs.emplace_back(sig[v.node], v.output);
    sig[node.id] = absl::Hash<std::tuple<std::string, std::string, std::vector<std::string>,
                                         std::vector<std::pair<uint64_t, int32_t>>, bool>>()(
        {std::string(node.op->name), AttrsText(node.attrs), specs, inputs, ir::IsLeaf(node)});
  }
  return sig;
}

// Every node `root` is computed from, `root` included, ascending.
std::vector<int32_t> Cone(const Graph& g, int32_t root) {
  absl::flat_hash_set<int32_t> seen = {root};
  std::vector<int32_t> stack = {root};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    for (const Value& v : g.node(id).inputs) {
      if (seen.insert(v.node).second) stack.push_back(v.node);
    }
  }
  std::vector<int32_t> cone(seen.begin(), seen.end());
  std::sort(cone.begin(), cone.end());
  return cone;
}

// Walks two cones in step; fills `map` (template node -> other node) or returns false.
bool Isomorphic(const Graph& g, int32_t a, int32_t b, absl::flat_hash_map<int32_t, int32_t>& map,
                absl::flat_hash_set<int32_t>& used) {
  if (auto it = map.find(a); it != map.end()) return it->second == b;
  if (used.contains(b)) return false;
  const Node& x = g.node(a);
  const Node& y = g.node(b);
  if (x.op != y.op || x.outputs != y.outputs || x.attrs != y.attrs ||
      x.inputs.size() != y.inputs.size() || !x.control_inputs.empty() ||
      !y.control_inputs.empty()) {
    return false;
  }
  map[a] = b;
  used.insert(b);
  for (size_t i = 0; i < x.inputs.size(); ++i) {
    if (x.inputs[i].output != y.inputs[i].output) return false;
    if (!Isomorphic(g, x.inputs[i].node, y.inputs[i].node, map, used)) return false;
  }
  return true;
}

class Finder {
 public:
  Finder(const Graph& g, Value loss, absl::Span<const Value> kept, int min_models)
      : g_(g), loss_(loss), kept_(kept.begin(), kept.end()), min_models_(std::max(min_models, 2)) {
    for (const Node& node : g.nodes()) {
      for (const Value& v : node.inputs) readers_[v].push_back(node.id);
    }
  }

  Matches Run() {
    const std::vector<uint64_t> sig = Signatures(g_);
    absl::flat_hash_map<uint64_t, std::vector<int32_t>> classes;
    for (const Node& node : g_.nodes()) {
      if (!ir::IsLeaf(node)) classes[sig[node.id]].push_back(node.id);
    }
    for (auto& [hash, members] : classes) {
      if (members.size() >= 2) classes_.push_back(members);
    }
    std::sort(classes_.begin(), classes_.end());  // Deterministic whatever the hash order.
    while (true) {
      std::optional<Candidate> best;
      for (const std::vector<int32_t>& members : classes_) {
        std::optional<Candidate> c = Evaluate(members, nullptr);
        if (!c.has_value()) continue;
        if (!best.has_value() || std::make_tuple(c->match.roots.size(), c->cone_size) >
                                     std::make_tuple(best->match.roots.size(), best->cone_size)) {
          best = std::move(c);
        }
      }
      if (!best.has_value()) break;
      Accept(*std::move(best));
    }
    for (const std::vector<int32_t>& members : classes_) {
      std::string reason;
      if (!Evaluate(members, &reason).has_value() && !reason.empty()) {
        out_.declined.push_back(std::move(reason));
      }
    }
    for (std::string& reason : skipped_) {
      if (std::find(out_.declined.begin(), out_.declined.end(), reason) == out_.declined.end()) {
        out_.declined.push_back(std::move(reason));
      }
    }
    return std::move(out_);
  }

 private:
  struct Candidate {
    Match match;
    size_t cone_size = 0;
    std::optional<SumTree> tree;
    std::vector<absl::flat_hash_set<int32_t>> cones;
  };

  // The greedy group of disjoint, isomorphic, unconsumed branches among `members`, if it is
  // large enough and batchable; else nullopt, with the reason in `*why` (when asked and when
  // there is one worth telling: too few branches is not).
  std::optional<Candidate> Evaluate(const std::vector<int32_t>& members, std::string* why) {
    Candidate c;
    absl::flat_hash_set<int32_t> taken;
    for (int32_t root : members) {
      if (consumed_.contains(root)) continue;
      const std::vector<int32_t> cone = Cone(g_, root);
      bool free = true;
      for (int32_t id : cone) {
        if (Shareable(g_.node(id))) continue;
        free = free && !consumed_.contains(id) && !taken.contains(id);
      }
      if (!free) continue;
      absl::flat_hash_map<int32_t, int32_t> map;
      absl::flat_hash_set<int32_t> used;
      if (!c.match.roots.empty() && !Isomorphic(g_, c.match.roots[0], root, map, used)) continue;
      // Only the root's value may leave a branch; a model whose inner values are read elsewhere
      // stays as it is.
      if (std::string reason = ReadOutside(root, cone); !reason.empty()) {
        if (why != nullptr) skipped_.push_back(std::move(reason));
        continue;
      }
      if (c.match.roots.empty()) {
        for (int32_t id : cone) map[id] = id;
        c.cone_size = cone.size();
      }
      taken.insert(cone.begin(), cone.end());
      c.match.roots.push_back(root);
      c.match.nodes.push_back(std::move(map));
      c.cones.emplace_back(cone.begin(), cone.end());
    }
    if (static_cast<int>(c.match.roots.size()) < min_models_) return std::nullopt;
    const std::string names = RootNames(c.match.roots);
    auto decline = [&](const std::string& reason) -> std::optional<Candidate> {
      if (why != nullptr) *why = absl::StrCat(names, ": ", reason);
      return std::nullopt;
    };
    for (int32_t id : c.cones[0]) {
      const Node& node = g_.node(id);
      (ir::IsLeaf(node) ? c.match.template_leaves : c.match.template_ops).push_back(id);
      if (ir::IsLeaf(node) ? !BatchableLeaf(node) : BatchedOpOf(node) == nullptr) {
        return decline(
            absl::StrCat("'", node.name, "' (", node.op_name(), ") has no batched form"));
      }
      if (!node.control_inputs.empty()) {
        return decline(absl::StrCat("'", node.name, "' waits on other nodes"));
      }
    }
    // Ascending, as the header promises: the cones are hash sets.
    std::sort(c.match.template_ops.begin(), c.match.template_ops.end());
    std::sort(c.match.template_leaves.begin(), c.match.template_leaves.end());
    for (const absl::flat_hash_set<int32_t>& cone : c.cones) {
      if (cone.contains(loss_.node)) {
        return decline(absl::StrCat("the loss '", g_.node(loss_.node).name, "' is one model's"));
      }
    }
    if (std::string reason = ClassifyLeaves(c); !reason.empty()) return decline(reason);
    if (std::string reason = CheckStackedShapes(c.match); !reason.empty()) return decline(reason);
    std::string tree_reason;
    if (!RootsSummed(c, tree_reason)) return decline(tree_reason);
    return c;
  }

  // Each input or constant of the template is either shared by every model (the same node) or
  // each model's own, stacked, and then read by nothing outside its model; else the reason.
  std::string ClassifyLeaves(Candidate& c) const {
    for (int32_t leaf : c.match.template_leaves) {
      if (!Shareable(g_.node(leaf))) continue;
      absl::flat_hash_set<int32_t> distinct;
      for (const auto& nodes : c.match.nodes) distinct.insert(nodes.at(leaf));
      if (distinct.size() == 1) {
        c.match.shared_leaves.push_back(leaf);
        continue;
      }
      if (distinct.size() != c.match.nodes.size()) {
        return absl::StrCat("some models share '", g_.node(leaf).name, "' and others do not");
      }
      for (size_t k = 0; k < c.match.nodes.size(); ++k) {
        const int32_t own = c.match.nodes[k].at(leaf);
        for (int32_t reader : Readers(Value{own, 0})) {
          if (!c.cones[k].contains(reader)) {
            return absl::StrCat("'", g_.node(own).name, "' is also read by '", g_.node(reader).name,
                                "', outside the model");
          }
        }
      }
    }
    return "";
  }

  // Why the inner values of the branch of `root` are read outside it, or "". Inputs and
  // constants are checked once the group is known (ClassifyLeaves): they may be shared.
  std::string ReadOutside(int32_t root, const std::vector<int32_t>& cone) const {
    const absl::flat_hash_set<int32_t> inside(cone.begin(), cone.end());
    for (int32_t id : cone) {
      if (id == root || Shareable(g_.node(id))) continue;
      for (int out = 0; out < static_cast<int>(g_.node(id).outputs.size()); ++out) {
        for (int32_t reader : Readers(Value{id, out})) {
          if (!inside.contains(reader)) {
            return absl::StrCat(g_.node(root).name, ": '", g_.node(id).name, "' is also read by '",
                                g_.node(reader).name, "', outside the model");
          }
        }
      }
    }
    return "";
  }

  // Each batched op accepts the stacked operands and gives the stacked results; else the reason.
  std::string CheckStackedShapes(const Match& match) const {
    const int64_t models = static_cast<int64_t>(match.roots.size());
    auto stacked = [&](const TensorSpec& spec) {
      std::vector<int64_t> dims = {models};
      dims.insert(dims.end(), spec.shape.dims().begin(), spec.shape.dims().end());
      return TensorSpec{Shape(std::move(dims)), spec.dtype};
    };
    for (int32_t id : match.template_ops) {
      const Node& node = g_.node(id);
      std::vector<TensorSpec> in;
      for (const Value& v : node.inputs) in.push_back(stacked(g_.spec(v)));
      absl::StatusOr<std::vector<TensorSpec>> out = BatchedOpOf(node)->infer(node.attrs, in);
      if (!out.ok()) {
        return absl::StrCat("'", node.name, "' does not batch: ", out.status().message());
      }
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (i >= out->size() || !((*out)[i] == stacked(node.outputs[i]))) {
          return absl::StrCat("'", node.name, "' does not batch to its stacked shape");
        }
      }
    }
    return "";
  }

  // The roots are read by nothing, or each once by one tree of scalar adds.
  bool RootsSummed(Candidate& c, std::string& reason) {
    const std::vector<int32_t>& roots = c.match.roots;
    const Node& root0 = g_.node(roots[0]);
    if (root0.outputs.size() != 1) {
      reason = absl::StrCat("'", root0.name, "' has several outputs");
      return false;
    }
    const bool any_read = !Readers(Value{roots[0], 0}).empty();
    absl::flat_hash_set<Value> root_values;
    for (int32_t r : roots) {
      root_values.insert(Value{r, 0});
      if (Readers(Value{r, 0}).empty() == any_read) {
        reason = "some models' roots are read and others are not";
        return false;
      }
    }
    if (!any_read) return true;
    const std::vector<int32_t> first = Readers(Value{roots[0], 0});
    if (first.size() != 1 || !IsScalarAdd(first[0])) {
      reason = absl::StrCat("'", root0.name, "' is read by '", g_.node(first[0]).name,
                            "', not by one sum of the models' results");
      return false;
    }
    SumTree tree = TreeOf(first[0], root_values);
    for (int32_t r : roots) {
      const int count =
          static_cast<int>(std::count(tree.leaves.begin(), tree.leaves.end(), Value{r, 0}));
      if (Readers(Value{r, 0}).size() != 1 || count != 1) {
        reason = absl::StrCat("'", g_.node(r).name, "' is not summed once with the other models'");
        return false;
      }
    }
    c.tree = std::move(tree);
    return true;
  }

  bool IsScalarAdd(int32_t id) const {
    const Node& node = g_.node(id);
    return node.op == &ops::AddOp() && node.outputs[0].shape.rank() == 0 &&
           node.outputs[0].dtype == DType::kFloat32 && node.control_inputs.empty();
  }

  // An add's value that only its one reader, a scalar add, reads (and nobody keeps) is inside
  // the same sum.
  bool FoldsInto(int32_t id) const {
    if (!IsScalarAdd(id) || kept_.contains(Value{id, 0})) return false;
    const std::vector<int32_t> readers = Readers(Value{id, 0});
    return readers.size() == 1 && IsScalarAdd(readers[0]);
  }

  SumTree TreeOf(int32_t add, const absl::flat_hash_set<Value>& roots) const {
    SumTree tree;
    tree.root = add;
    while (FoldsInto(tree.root)) tree.root = Readers(Value{tree.root, 0})[0];
    Collect(tree.root, roots, tree);
    std::sort(tree.adds.begin(), tree.adds.end());
    return tree;
  }

  void Collect(int32_t add, const absl::flat_hash_set<Value>& roots, SumTree& tree) const {
    tree.adds.push_back(add);
    for (const Value& v : g_.node(add).inputs) {
      if (!roots.contains(v) && FoldsInto(v.node)) {
        Collect(v.node, roots, tree);
      } else {
        tree.leaves.push_back(v);
      }
    }
  }

  void Accept(Candidate c) {
    for (const absl::flat_hash_set<int32_t>& cone : c.cones)
      consumed_.insert(cone.begin(), cone.end());
    if (c.tree.has_value()) {
      // Two groups summed by one tree share it.
      auto same = std::find_if(out_.trees.begin(), out_.trees.end(),
                               [&](const SumTree& t) { return t.root == c.tree->root; });
      if (same == out_.trees.end()) out_.trees.push_back(*std::move(c.tree));
    }
    out_.groups.push_back(std::move(c.match));
  }

  const std::vector<int32_t>& Readers(Value v) const {
    static const std::vector<int32_t> kNone;
    auto it = readers_.find(v);
    return it == readers_.end() ? kNone : it->second;
  }

  std::string RootNames(const std::vector<int32_t>& roots) const {
    std::vector<std::string> names;
    for (size_t i = 0; i < roots.size() && i < 3; ++i) names.push_back(g_.node(roots[i]).name);
    std::string text = absl::StrJoin(names, ", ");
    if (roots.size() > 3) absl::StrAppend(&text, " and ", roots.size() - 3, " more");
    return text;
  }

  const Graph& g_;
  const Value loss_;
  const absl::flat_hash_set<Value> kept_;
  const int min_models_;
  absl::flat_hash_map<Value, std::vector<int32_t>> readers_;
  std::vector<std::vector<int32_t>> classes_;
  absl::flat_hash_set<int32_t> consumed_;
  std::vector<std::string> skipped_;  // Models left out of a group, and why.
  Matches out_;
};

}  // namespace

const ir::OpDef* BatchedOpOf(const Node& node) {
  if (node.op == &ops::MatmulOp()) return &ops::BatchedMatmulOp();
  if (node.op == &ops::BiasAddOp()) return &ops::BatchedBiasAddOp();
  if (node.op == &ops::SoftmaxCrossEntropyOp()) {
    // The batched loss takes every column as a class: no padding columns.
    if (node.attrs.contains(ops::kLossClassesAttr)) return nullptr;
    return &ops::BatchedSoftmaxCrossEntropyOp();
  }
  if (IsElementwise(node)) return node.op;
  return nullptr;
}

absl::StatusOr<Matches> FindEnsembles(const Graph& graph, Value loss, absl::Span<const Value> kept,
                                      int min_models) {
  RETURN_IF_ERROR(graph.SpecOf(loss).status());
  for (const Value& v : kept) RETURN_IF_ERROR(graph.SpecOf(v).status());
  return Finder(graph, loss, kept, min_models).Run();
}

}  // namespace reprise::passes::ensemble
