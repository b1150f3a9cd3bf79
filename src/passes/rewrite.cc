#include "src/passes/rewrite.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

Consumers::Consumers(const Graph& graph) : control_successors(graph.num_nodes()) {
  for (const Node& node : graph.nodes()) {
    for (const Value& v : node.inputs) readers[v].push_back(node.id);
    for (int32_t c : node.control_inputs) control_successors[c].push_back(node.id);
  }
}

bool Placeable(const Graph& graph, const Consumers& consumers,
               const absl::flat_hash_set<int32_t>& members) {
  const auto [lo, hi] = std::minmax_element(members.begin(), members.end());
  const int32_t first = *lo, last = *hi;
  auto inside = [&](int32_t id) { return id > first && id < last && !members.contains(id); };
  for (int32_t m : members) {
    for (int out = 0; out < static_cast<int>(graph.node(m).outputs.size()); ++out) {
      auto it = consumers.readers.find(Value{m, out});
      if (it == consumers.readers.end()) continue;
      for (int32_t reader : it->second) {
        if (inside(reader)) return false;
      }
    }
    for (int32_t successor : consumers.control_successors[m]) {
      if (inside(successor)) return false;
    }
  }
  return true;
}

bool GroupPlaceable(const Graph& graph, const Consumers& consumers, const NodeGroup& group) {
  const absl::flat_hash_set<int32_t> members(group.members.begin(), group.members.end());
  if (!group.at_first_member) return Placeable(graph, consumers, members);
  // At the first member, every input of every member must already be there: leaves or nodes
  // before it, and no node the members must wait for.
  if (members.empty()) return false;
  const int32_t first = *std::min_element(members.begin(), members.end());
  for (int32_t m : members) {
    const Node& node = graph.node(m);
    if (!node.control_inputs.empty()) return false;
    for (const Value& v : node.inputs) {
      if (!ir::IsLeaf(graph.node(v.node)) && v.node >= first) return false;
    }
  }
  return true;
}

Value NewValueKey(const Graph& graph, int i) { return Value{graph.num_nodes() + i, 0}; }

absl::StatusOr<Value> CopyLeaf(Graph& g, const Node& node) {
  const TensorSpec& spec = node.outputs[0];
  if (node.op == &ir::InputOp()) return g.AddInput(node.name, spec, node.init);
  if (node.op == &ir::ParameterOp()) return g.AddParameter(node.name, spec, node.init);
  if (node.op == &ir::StateOp()) return g.AddState(node.name, spec, node.init);
  return g.AddConstant(node.name, spec, node.init);
}

namespace {

// `reads(reader, v)`: whether `reader` still reads `v` once the groups are formed (a member of
// another group reads only that group's inputs).
template <typename Reads>
absl::Status CheckGroup(const Graph& graph, const Consumers& consumers, const NodeGroup& group,
                        const absl::flat_hash_set<int32_t>& members,
                        const absl::flat_hash_set<Value>& kept, Reads&& reads) {
  const std::string where = absl::StrCat("fused group '", group.name, "'");
  if (members.empty() || group.op == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(where, ": no members or no op"));
  if (!GroupPlaceable(graph, consumers, group))
    return absl::InvalidArgumentError(absl::StrCat(where, ": another node runs between members"));
  const absl::flat_hash_set<Value> outputs(group.outputs.begin(), group.outputs.end());
  for (int32_t m : members) {
    const Node& node = graph.node(m);
    if (ir::IsLeaf(node))
      return absl::InvalidArgumentError(absl::StrCat(where, ": leaf '", node.name, "'"));
    for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
      const Value v{m, out};
      bool needed = kept.contains(v);
      auto it = consumers.readers.find(v);
      if (it != consumers.readers.end()) {
        for (int32_t reader : it->second) {
          needed = needed || (!members.contains(reader) && reads(reader, v));
        }
      }
      if (needed && !outputs.contains(v)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": output ", out, " of '", node.name,
                                                       "' is needed outside but not kept"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RewrittenGraph> ReplaceGroups(const Graph& graph, absl::Span<const NodeGroup> groups,
                                             absl::Span<const Value> kept) {
  const Consumers consumers(graph);
  const absl::flat_hash_set<Value> kept_set(kept.begin(), kept.end());
  std::vector<int> group_of(graph.num_nodes(), -1);
  std::vector<int32_t> anchor(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    for (int32_t m : groups[i].members) {
      if (m < 0 || m >= graph.num_nodes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fused group '", groups[i].name, "': no node ", m));
      }
      if (group_of[m] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", graph.node(m).name, "' is in two fused groups"));
      }
      group_of[m] = static_cast<int>(i);
    }
  }
  auto reads = [&](int32_t reader, Value v) {
    if (group_of[reader] < 0) return true;
    const std::vector<Value>& inputs = groups[group_of[reader]].inputs;
    return std::find(inputs.begin(), inputs.end(), v) != inputs.end();
  };
  for (size_t i = 0; i < groups.size(); ++i) {
    const absl::flat_hash_set<int32_t> members(groups[i].members.begin(), groups[i].members.end());
    RETURN_IF_ERROR(CheckGroup(graph, consumers, groups[i], members, kept_set, reads));
    anchor[i] = groups[i].at_first_member ? *std::min_element(members.begin(), members.end())
                                          : *std::max_element(members.begin(), members.end());
  }

  RewrittenGraph out;
  Graph& g = out.graph;
  g.ShareIdentityWith(graph);
  auto map_value = [&](Value v) -> absl::StatusOr<Value> {
    auto it = out.values.find(v);
    if (it == out.values.end()) {
      if (v.node >= graph.num_nodes()) {
        return absl::InternalError(
            absl::StrCat("new value ", v.node - graph.num_nodes(), " is read before it is made"));
      }
      return absl::InternalError(absl::StrCat("value ", v.output, " of '", graph.node(v.node).name,
                                              "' was fused away but is still read"));
    }
    return it->second;
  };
  auto add_controls = [&](int32_t new_id, absl::Span<const int32_t> old_controls) -> absl::Status {
    absl::flat_hash_set<int32_t> done;
    for (int32_t c : old_controls) {
      auto it = out.nodes.find(c);
      if (it == out.nodes.end()) {
        return absl::InternalError(
            absl::StrCat("'", graph.node(c).name, "' must run first but is not placed yet"));
      }
      if (it->second == new_id || !done.insert(it->second).second) continue;
      RETURN_IF_ERROR(g.AddControlEdge(it->second, new_id));
    }
    return absl::OkStatus();
  };

  // Leaves first (a group may read a leaf added after its members, such as a fused kernel's
  // own state), then the other nodes in their order.
  for (const Node& node : graph.nodes()) {
    if (!ir::IsLeaf(node)) continue;
    ASSIGN_OR_RETURN(Value v, CopyLeaf(g, node));
    out.values[Value{node.id, 0}] = v;
    out.nodes[node.id] = v.node;
  }
  for (const Node& node : graph.nodes()) {
    const int group = group_of[node.id];
    if (ir::IsLeaf(node)) continue;
    if (group < 0) {
      std::vector<Value> inputs;
      for (const Value& v : node.inputs) {
        ASSIGN_OR_RETURN(Value mapped, map_value(v));
        inputs.push_back(mapped);
      }
      ASSIGN_OR_RETURN(std::vector<Value> values, g.AddOp(*node.op, node.name, inputs, node.attrs));
      const int32_t id = g.num_nodes() - 1;
      for (size_t o = 0; o < values.size(); ++o)
        out.values[Value{node.id, static_cast<int>(o)}] = values[o];
      out.nodes[node.id] = id;
      RETURN_IF_ERROR(add_controls(id, node.control_inputs));
      continue;
    }
    if (node.id != anchor[group]) continue;  // The group's node goes where its anchor was.
    const NodeGroup& spec = groups[group];
    std::vector<Value> inputs;
    for (const Value& v : spec.inputs) {
      ASSIGN_OR_RETURN(Value mapped, map_value(v));
      inputs.push_back(mapped);
    }
    Attrs attrs = spec.attrs;
    std::vector<std::string> names;
    std::vector<int32_t> sorted = spec.members;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> controls;
    for (int32_t m : sorted) {
      names.push_back(graph.node(m).name);
      for (int32_t c : graph.node(m).control_inputs) {
        if (group_of[c] != group) controls.push_back(c);
      }
    }
    attrs["fused_nodes"] = absl::StrJoin(names, ",");
    ASSIGN_OR_RETURN(std::vector<Value> values, g.AddOp(*spec.op, spec.name, inputs, attrs));
    if (values.size() != spec.outputs.size()) {
      return absl::InternalError(absl::StrCat("fused group '", spec.name, "': op ", spec.op->name,
                                              " gives ", values.size(), " outputs, expected ",
                                              spec.outputs.size()));
    }
    const int32_t id = g.num_nodes() - 1;
    for (size_t o = 0; o < values.size(); ++o) {
      if (!spec.outputs[o].valid()) continue;  // A new value (e.g. scratch) with no old one.
      if (spec.outputs[o].node >= graph.num_nodes()) {  // A new value a later group reads.
        out.values[spec.outputs[o]] = values[o];
        continue;
      }
      if (!(g.spec(values[o]) == graph.spec(spec.outputs[o]))) {
        return absl::InternalError(absl::StrCat("fused group '", spec.name, "': output ", o, " is ",
                                                g.spec(values[o]).ToString(), ", replacing ",
                                                graph.spec(spec.outputs[o]).ToString()));
      }
      out.values[spec.outputs[o]] = values[o];
    }
    for (int32_t m : sorted) out.nodes[m] = id;
    RETURN_IF_ERROR(add_controls(id, controls));
  }
  for (auto it = out.values.begin(); it != out.values.end();) {  // Callers map old values only.
    auto here = it++;
    if (here->first.node >= graph.num_nodes()) out.values.erase(here);
  }
  return out;
}

}  // namespace reprise::passes
