// Graph: a static-shape dataflow graph of named inputs, parameters and ops. Users build it through
// the layer builders in nn.h; the engine extends a copy of it with the backward pass and the
// optimizer. Every builder checks shapes and dtypes at once and returns a Status naming the op.
//
//   reprise::Graph g;
//   ASSIGN_OR_RETURN(Value x, g.AddInput("x", {Shape{32, 256}, DType::kFloat32}));
//   ASSIGN_OR_RETURN(Value h, reprise::nn::Linear(g, x, 256, "fc1"));
#ifndef REPRISE_INCLUDE_REPRISE_GRAPH_H_
#define REPRISE_INCLUDE_REPRISE_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"

namespace reprise {

namespace ir {
struct OpDef;  // An op's definition (shape rule, gradient, CPU reference, GPU lowering).
}

// One output of one node.
struct Value {
  int32_t node = -1;
  int32_t output = 0;
  // Graph::id() of the graph that made it (a copy of that graph accepts it too), so that a value
  // of another graph is refused instead of naming whatever node has its number there; 0 for a
  // value written by hand (Value{node, output}), which every graph accepts. Not part of equality
  // or hashing: the same output of the same node, however it was obtained.
  uint32_t graph = 0;

  bool valid() const { return node >= 0; }
  // Whether a graph of Graph::id() `graph_id` (or a copy of it) may take this value.
  bool MadeBy(uint32_t graph_id) const { return graph == 0 || graph == graph_id; }
  bool operator==(const Value& other) const { return node == other.node && output == other.output; }
  template <typename H>
  friend H AbslHashValue(H h, const Value& v) {
    return H::combine(std::move(h), v.node, v.output);
  }
};

using AttrValue = std::variant<int64_t, double, bool, std::string>;
using Attrs = std::map<std::string, AttrValue>;  // Ordered, so dumps and hashes are stable.

// How a parameter, state or constant starts.
struct Initializer {
  enum class Kind : uint8_t { kZeros, kConstant, kUniform };
  Kind kind = Kind::kZeros;
  double value = 0;          // kConstant
  double low = 0, high = 0;  // kUniform

  static Initializer Zeros() { return {}; }
  static Initializer Constant(double v) { return {Kind::kConstant, v, 0, 0}; }
  static Initializer Uniform(double low, double high) { return {Kind::kUniform, 0, low, high}; }
};

struct Node {
  int32_t id = -1;
  const ir::OpDef* op = nullptr;
  std::string name;  // Unique in the graph.
  std::vector<Value> inputs;
  std::vector<TensorSpec> outputs;
  Attrs attrs;
  std::vector<int32_t> control_inputs;  // Nodes that must run before this one (in-place writers).
  Initializer init;                     // For inputs (default value), parameters, state, constants.

  absl::string_view op_name() const;
};

class Graph {
 public:
  // A graph of its own identity (id()); a copy keeps its source's, so that the source's values
  // name the same nodes in it (the engine extends copies of the user's graph).
  Graph();

  // A value fed each step (a batch, a label vector or a scalar such as the learning rate).
  // `default_value` fills it until the user binds one.
  absl::StatusOr<Value> AddInput(absl::string_view name, TensorSpec spec,
                                 Initializer default_value = Initializer::Zeros());
  // A trainable tensor, updated by the optimizer.
  absl::StatusOr<Value> AddParameter(absl::string_view name, TensorSpec spec, Initializer init);
  // A persistent non-trainable tensor (optimizer state, running statistics).
  absl::StatusOr<Value> AddState(absl::string_view name, TensorSpec spec, Initializer init);
  // A tensor fixed for the life of the graph.
  absl::StatusOr<Value> AddConstant(absl::string_view name, TensorSpec spec, Initializer init);

  // Adds a node of `op`; infers and checks its outputs. An empty name gets "<op>_<id>".
  // InvalidArgument names the op, the node and the offending shapes.
  absl::StatusOr<std::vector<Value>> AddOp(const ir::OpDef& op, absl::string_view name,
                                           std::vector<Value> inputs, Attrs attrs = {});
  // Single-output convenience form of AddOp.
  absl::StatusOr<Value> AddOp1(const ir::OpDef& op, absl::string_view name,
                               std::vector<Value> inputs, Attrs attrs = {});
  // `after` runs after `before`, whatever their data dependencies.
  absl::Status AddControlEdge(int32_t before, int32_t after);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int32_t id) const { return nodes_[id]; }
  absl::Span<const Node> nodes() const { return nodes_; }
  // NotFound for an unknown name.
  absl::StatusOr<int32_t> FindNode(absl::string_view name) const;
  // InvalidArgument for a value not in this graph: a node it does not have, or a value another
  // graph made (Value::graph).
  absl::StatusOr<TensorSpec> SpecOf(Value v) const;
  // Whether `v` was made by this graph or the graph it was copied from (or by hand).
  bool Owns(Value v) const { return v.MadeBy(id_); }
  uint32_t id() const { return id_; }
  // Takes `source`'s identity, as a copy would have it: for the engine's passes that rebuild a
  // graph from `source` node by node, so that the user's values, which they map through, stay
  // values of every graph derived from the user's.
  void ShareIdentityWith(const Graph& source) { id_ = source.id_; }
  const TensorSpec& spec(Value v) const { return nodes_[v.node].outputs[v.output]; }
  // Nodes that are inputs, parameters, state or constants, by op name ("input", "parameter", ...).
  std::vector<int32_t> NodesOf(absl::string_view op_name) const;
  int64_t NumParameterElements() const;

  std::string ToString() const;  // One line per node, in id order.

  // A point to roll back to: what the graph held when Mark() was called.
  struct Mark {
    int32_t num_nodes = 0;
    size_t num_control_edges = 0;
  };
  Mark GetMark() const { return {num_nodes(), control_log_.size()}; }
  // Removes every node, name and control edge added since `mark`, so the graph is exactly as it
  // was then. Values made since the mark become invalid.
  void RollBack(const Mark& mark);

 private:
  absl::StatusOr<Value> AddLeaf(const ir::OpDef& op, absl::string_view name, TensorSpec spec,
                                Initializer init);
  absl::Status CheckValue(Value v, absl::string_view use) const;

  uint32_t id_;  // Unique per graph built from scratch, never 0; copies keep it.
  std::vector<Node> nodes_;
  absl::flat_hash_map<std::string, int32_t> by_name_;
  std::vector<int32_t> control_log_;  // The `after` node of each control edge, in order added.
};

// Runs `build` (returning a Status or StatusOr) and, when it fails, rolls `graph` back to what it
// was before: a builder that fails halfway leaves no node, parameter or name behind, so a retry
// with the same names succeeds. Every multi-node builder in nn.h and models.h goes through it.
template <typename Build>
auto Transactional(Graph& graph, Build&& build) -> decltype(build()) {
  const Graph::Mark mark = graph.GetMark();
  auto result = build();
  if (!result.ok()) graph.RollBack(mark);
  return result;
}

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_GRAPH_H_
