#include "reprise/graph.h"

#include <atomic>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::string_view Node::op_name() const { return op == nullptr ? "?" : op->name; }

namespace {

uint32_t NewGraphId() {
  static std::atomic<uint32_t> last{0};
  uint32_t id = last.fetch_add(1, std::memory_order_relaxed) + 1;
  while (id == 0) id = last.fetch_add(1, std::memory_order_relaxed) + 1;  // 0 is "by hand".
  return id;
}

}  // namespace

Graph::Graph() : id_(NewGraphId()) {}

absl::Status Graph::CheckValue(Value v, absl::string_view use) const {
  if (!Owns(v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        use, ": the value (node ", v.node, ", output ", v.output,
        ") was made by another graph; only this graph's values (or those of the graph it "
        "was copied from) name its nodes"));
  }
  if (v.node < 0 || v.node >= num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(use, ": value refers to node ", v.node, ", which is not in this graph"));
  }
  const Node& n = nodes_[v.node];
  if (v.output < 0 || v.output >= static_cast<int>(n.outputs.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(use, ": node '", n.name, "' has no output ", v.output));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Graph::AddLeaf(const ir::OpDef& op, absl::string_view name, TensorSpec spec,
                                     Initializer init) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("a graph ", op.name, " needs a name"));
  }
  for (int64_t d : spec.shape.dims()) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op.name, " '", name, "': shape ", spec.shape.ToString(), " has a non-positive extent"));
    }
  }
  if (absl::StatusOr<int64_t> bytes = spec.CheckedBytes(); !bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op.name, " '", name, "': ", bytes.status().message()));
  }
  RETURN_IF_ERROR(ir::CheckInitializer(init, absl::StrCat(op.name, " '", name, "'")));
  ASSIGN_OR_RETURN(std::vector<Value> out, AddOp(op, name, {}, {}));
  Node& node = nodes_[out[0].node];
  node.outputs = {std::move(spec)};
  node.init = init;
  return out[0];
}

absl::StatusOr<Value> Graph::AddInput(absl::string_view name, TensorSpec spec,
                                      Initializer default_value) {
  return AddLeaf(ir::InputOp(), name, std::move(spec), default_value);
}
absl::StatusOr<Value> Graph::AddParameter(absl::string_view name, TensorSpec spec,
                                          Initializer init) {
  if (spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be f32, not ", spec.ToString()));
  }
  return AddLeaf(ir::ParameterOp(), name, std::move(spec), init);
}
absl::StatusOr<Value> Graph::AddState(absl::string_view name, TensorSpec spec, Initializer init) {
  return AddLeaf(ir::StateOp(), name, std::move(spec), init);
}
absl::StatusOr<Value> Graph::AddConstant(absl::string_view name, TensorSpec spec,
                                         Initializer init) {
  return AddLeaf(ir::ConstantOp(), name, std::move(spec), init);
}

absl::StatusOr<std::vector<Value>> Graph::AddOp(const ir::OpDef& op, absl::string_view name,
                                                std::vector<Value> inputs, Attrs attrs) {
  const int32_t id = num_nodes();
  std::string node_name = name.empty() ? absl::StrCat(op.name, "_", id) : std::string(name);
  if (by_name_.contains(node_name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("a node named '", node_name, "' is already in the graph"));
  }
  const std::string where = absl::StrCat("op '", op.name, "' node '", node_name, "'");
  std::vector<TensorSpec> input_specs;
  for (const Value& v : inputs) {
    RETURN_IF_ERROR(CheckValue(v, where));
    input_specs.push_back(spec(v));
  }
  std::vector<TensorSpec> outputs = {TensorSpec{}};  // Leaves set theirs in AddLeaf.
  if (op.kind != ir::OpKind::kLeaf) {
    auto inferred = op.infer(attrs, input_specs);
    if (!inferred.ok()) {
      return absl::Status(inferred.status().code(),
                          absl::StrCat(where, ": ", inferred.status().message()));
    }
    outputs = *std::move(inferred);
    for (size_t i = 0; i < outputs.size(); ++i) {
      // A shape rule multiplies extents (padding, widths): a product that wraps must not become a
      // small buffer, so every output is counted with overflow checks before it is accepted.
      if (absl::StatusOr<int64_t> bytes = outputs[i].CheckedBytes(); !bytes.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": output ", i, ": ", bytes.status().message()));
      }
    }
    for (int index : ir::MutatedInputs(op, attrs, static_cast<int>(inputs.size()))) {
      const Node& target = nodes_[inputs[index].node];
      if (target.op != &ir::ParameterOp() && target.op != &ir::StateOp()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": writes input ", index, " ('",
                                                       target.name,
                                                       "') in place, but only parameters and "
                                                       "state may be written"));
      }
    }
  }
  Node node;
  node.id = id;
  node.op = &op;
  node.name = node_name;
  node.inputs = std::move(inputs);
  for (Value& v : node.inputs) v.graph = 0;  // A node's own record: no graph's stamp.
  node.outputs = std::move(outputs);
  node.attrs = std::move(attrs);
  by_name_[node_name] = id;
  std::vector<Value> values;
  for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) values.push_back({id, i, id_});
  nodes_.push_back(std::move(node));
  return values;
}

absl::StatusOr<Value> Graph::AddOp1(const ir::OpDef& op, absl::string_view name,
                                    std::vector<Value> inputs, Attrs attrs) {
  ASSIGN_OR_RETURN(std::vector<Value> out, AddOp(op, name, std::move(inputs), std::move(attrs)));
  if (out.size() != 1) {
    return absl::InternalError(
        absl::StrCat("op '", op.name, "' has ", out.size(), " outputs, not one"));
  }
  return out[0];
}

absl::Status Graph::AddControlEdge(int32_t before, int32_t after) {
  if (before < 0 || before >= num_nodes() || after < 0 || after >= num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("control edge ", before, " -> ", after, " names a node outside the graph"));
  }
  if (before >= after) {
    // Nodes are added in a topological order; an edge backwards would make a cycle possible.
    return absl::InvalidArgumentError(absl::StrCat("control edge from '", nodes_[before].name,
                                                   "' to the earlier node '", nodes_[after].name,
                                                   "'"));
  }
  nodes_[after].control_inputs.push_back(before);
  control_log_.push_back(after);
  return absl::OkStatus();
}

void Graph::RollBack(const Mark& mark) {
  while (control_log_.size() > mark.num_control_edges) {
    nodes_[control_log_.back()].control_inputs.pop_back();
    control_log_.pop_back();
  }
  while (num_nodes() > mark.num_nodes) {
    by_name_.erase(nodes_.back().name);
    nodes_.pop_back();
  }
}

absl::StatusOr<int32_t> Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no node named '", name, "' in the graph"));
  }
  return it->second;
}

absl::StatusOr<TensorSpec> Graph::SpecOf(Value v) const {
  RETURN_IF_ERROR(CheckValue(v, "SpecOf"));
  return spec(v);
}

std::vector<int32_t> Graph::NodesOf(absl::string_view op_name) const {
  std::vector<int32_t> ids;
  for (const Node& n : nodes_) {
    if (n.op->name == op_name) ids.push_back(n.id);
  }
  return ids;
}

// INT64_MAX where the sum of the parameters' (each fitting) element counts would not fit.
int64_t Graph::NumParameterElements() const {
  int64_t total = 0;
  for (int32_t id : NodesOf("parameter")) {
    total = SaturatingAdd(total, nodes_[id].outputs[0].NumElements());
  }
  return total;
}

namespace {
std::string AttrToString(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return x;
        else
          return absl::StrCat(x);
      },
      v);
}
}  // namespace

std::string Graph::ToString() const {
  std::string out;
  for (const Node& n : nodes_) {
    std::vector<std::string> ins, outs, attrs;
    for (const Value& v : n.inputs) {
      ins.push_back(v.output == 0 ? nodes_[v.node].name
                                  : absl::StrCat(nodes_[v.node].name, ":", v.output));
    }
    for (const TensorSpec& s : n.outputs) outs.push_back(s.ToString());
    for (const auto& [k, v] : n.attrs) attrs.push_back(absl::StrCat(k, "=", AttrToString(v)));
    absl::StrAppend(&out, "%", n.id, " ", n.name, " = ", n.op_name(), "(", absl::StrJoin(ins, ", "),
                    ")");
    if (!attrs.empty()) absl::StrAppend(&out, " {", absl::StrJoin(attrs, ", "), "}");
    absl::StrAppend(&out, " -> ", absl::StrJoin(outs, ", "), "\n");
  }
  return out;
}

}  // namespace reprise
