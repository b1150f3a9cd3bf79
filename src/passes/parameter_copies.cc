// KeepParameterCopies (parameter_copies.h): finds the cast_multi and its update (adam_multi or
// sgd_multi), then rebuilds the graph node by node with the copies as state.
#include "src/passes/parameter_copies.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/passes/rewrite.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

// What the rewrite needs to know about the pair.
struct Pair {
  int32_t cast = -1, update = -1;
  int per_tensor = 0;          // The update's inputs per tensor, its weight first.
  std::vector<int64_t> order;  // The update's tensors, those with copies first (the cast's order).
  std::vector<std::string> copy_names;  // Of the cast's outputs' states, in the cast's order.
};

// The one node of `op`, if there is exactly one.
std::optional<int32_t> OnlyNodeOf(const Graph& g, const ir::OpDef& op) {
  std::optional<int32_t> found;
  for (const Node& node : g.nodes()) {
    if (node.op != &op) continue;
    if (found.has_value()) return std::nullopt;
    found = node.id;
  }
  return found;
}

std::optional<Pair> FindPair(const Graph& g, const absl::flat_hash_set<Value>& kept) {
  const std::optional<int32_t> cast = OnlyNodeOf(g, ops::CastMultiOp());
  const std::optional<int32_t> adam = OnlyNodeOf(g, ops::AdamMultiOp());
  const std::optional<int32_t> sgd = OnlyNodeOf(g, ops::SgdMultiOp());
  if (!cast.has_value() || adam.has_value() == sgd.has_value()) return std::nullopt;
  const std::optional<int32_t> update = adam.has_value() ? adam : sgd;
  const int per_tensor =
      adam.has_value() ? ops::kAdamMultiInputsPerTensor : ops::kSgdMultiInputsPerTensor;
  const Node& c = g.node(*cast);
  const Node& a = g.node(*update);
  const absl::StatusOr<int64_t> tensors = ir::IntAttr(a.attrs, "tensors");
  const absl::StatusOr<DType> to = ops::CastTargetOf(c.attrs);
  if (a.attrs.contains("copies") || !tensors.ok() || !to.ok()) return std::nullopt;
  absl::flat_hash_map<int32_t, int64_t> tensor_of;  // Parameter node -> the update's tensor.
  for (int64_t t = 0; t < *tensors; ++t) tensor_of[a.inputs[per_tensor * t].node] = t;
  Pair pair{.cast = *cast, .update = *update, .per_tensor = per_tensor};
  absl::flat_hash_set<int64_t> copied;
  absl::flat_hash_set<std::string> names;
  for (const Value& p : c.inputs) {
    auto it = tensor_of.find(p.node);
    if (p.output != 0 || it == tensor_of.end() || !copied.insert(it->second).second) {
      return std::nullopt;
    }
    pair.order.push_back(it->second);
    std::string name = absl::StrCat(g.node(p.node).name, ".", DTypeName(*to), "_copy");
    if (g.FindNode(name).ok() || !names.insert(name).second) return std::nullopt;
    pair.copy_names.push_back(std::move(name));
  }
  for (int64_t t = 0; t < *tensors; ++t) {
    if (!copied.contains(t)) pair.order.push_back(t);
  }
  // Every reader of a copy runs before the update (node order is a topological order).
  for (const Node& node : g.nodes()) {
    for (const Value& v : node.inputs) {
      if (v.node == c.id && node.id >= a.id) return std::nullopt;
    }
  }
  for (int i = 0; i < static_cast<int>(c.outputs.size()); ++i) {
    if (kept.contains(Value{c.id, i})) return std::nullopt;
  }
  return pair;
}

// The rebuilt graph and where each old value and node went.
struct Rebuilt {
  Graph graph;
  absl::flat_hash_map<Value, Value> values;
  std::vector<int32_t> nodes;
};

absl::StatusOr<Rebuilt> Rebuild(const Graph& g, const Pair& pair) {
  Rebuilt out;
  out.graph.ShareIdentityWith(g);
  out.nodes.assign(g.num_nodes(), -1);
  for (const Node& node : g.nodes()) {
    if (!ir::IsLeaf(node)) continue;
    ASSIGN_OR_RETURN(const Value v, CopyLeaf(out.graph, node));
    out.values[Value{node.id, 0}] = v;
    out.nodes[node.id] = v.node;
  }
  const Node& cast = g.node(pair.cast);
  std::vector<Value> copies;
  for (int i = 0; i < static_cast<int>(cast.outputs.size()); ++i) {
    ASSIGN_OR_RETURN(Value copy,
                     out.graph.AddState(pair.copy_names[i], cast.outputs[i], Initializer::Zeros()));
    out.values[Value{cast.id, i}] = copy;
    copies.push_back(copy);
  }
  // Nonzero until the first update: the first step rounds the initial weights.
  ASSIGN_OR_RETURN(const Value stale,
                   out.graph.AddState(absl::StrCat(cast.name, ".stale"), {Shape{}, DType::kInt32},
                                      Initializer::Constant(1)));
  int32_t refresh = -1;
  std::vector<int32_t> copy_readers;
  for (const Node& node : g.nodes()) {
    if (ir::IsLeaf(node)) continue;
    std::vector<Value> inputs;
    for (const Value& v : node.inputs) inputs.push_back(out.values.at(v));
    Attrs attrs = node.attrs;
    const ir::OpDef* op = node.op;
    if (node.id == pair.cast) {
      op = &ops::RefreshCopiesOp();
      inputs.insert(inputs.end(), copies.begin(), copies.end());
      inputs.push_back(stale);
    } else if (node.id == pair.update) {
      std::vector<Value> reordered;
      for (int64_t t : pair.order) {
        reordered.insert(reordered.end(), inputs.begin() + pair.per_tensor * t,
                         inputs.begin() + pair.per_tensor * (t + 1));
      }
      const size_t per_tensor_inputs = reordered.size();
      reordered.insert(reordered.end(), inputs.begin() + per_tensor_inputs, inputs.end());
      reordered.insert(reordered.end(), copies.begin(), copies.end());
      reordered.push_back(stale);
      inputs = std::move(reordered);
      attrs["copies"] = static_cast<int64_t>(copies.size());
    }
    ASSIGN_OR_RETURN(const std::vector<Value> outputs,
                     out.graph.AddOp(*op, node.name, std::move(inputs), std::move(attrs)));
    const int32_t id = out.graph.num_nodes() - 1;
    out.nodes[node.id] = id;
    for (int i = 0; i < static_cast<int>(outputs.size()); ++i) {
      out.values[Value{node.id, i}] = outputs[i];
    }
    for (int32_t before : node.control_inputs) {
      RETURN_IF_ERROR(out.graph.AddControlEdge(out.nodes[before], id));
    }
    if (node.id == pair.cast) refresh = id;
    bool reads_copy = false;
    for (const Value& v : node.inputs) reads_copy |= v.node == pair.cast;
    if (reads_copy) {
      RETURN_IF_ERROR(out.graph.AddControlEdge(refresh, id));  // The copies are current.
      copy_readers.push_back(id);
    }
    if (node.id == pair.update) {
      // The update overwrites the copies and clears the flag once everything read them.
      RETURN_IF_ERROR(out.graph.AddControlEdge(refresh, id));
      for (int32_t reader : copy_readers) RETURN_IF_ERROR(out.graph.AddControlEdge(reader, id));
    }
  }
  return out;
}

}  // namespace

absl::Status KeepParameterCopies(FusedTraining& fused, absl::Span<const Value> kept) {
  autodiff::TrainingGraph& t = fused.training;
  const std::optional<Pair> pair =
      FindPair(t.graph, absl::flat_hash_set<Value>(kept.begin(), kept.end()));
  if (!pair.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Rebuilt rebuilt, Rebuild(t.graph, *pair));
  t.graph = std::move(rebuilt.graph);
  t.loss = rebuilt.values.at(t.loss);
  for (int32_t& p : t.parameters) p = rebuilt.nodes[p];
  absl::flat_hash_map<int32_t, Value> gradients;
  for (const auto& [p, g] : t.gradients) gradients[rebuilt.nodes[p]] = rebuilt.values.at(g);
  t.gradients = std::move(gradients);
  for (int32_t& o : t.optimizer_nodes) o = rebuilt.nodes[o];
  for (auto& [from, to] : fused.values) to = rebuilt.values.at(to);
  return absl::OkStatus();
}

}  // namespace reprise::passes
