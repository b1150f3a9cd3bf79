// Graph rewriting: replaces groups of nodes by one node each (the fuse pass's fused kernels),
// building a new graph with every other node copied in the same order.
#ifndef REPRISE_SRC_PASSES_REWRITE_H_
#define REPRISE_SRC_PASSES_REWRITE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/op_def.h"

namespace reprise::passes {

// Nodes of the old graph that become one node of `op`.
struct NodeGroup {
  std::vector<int32_t> members;  // Non-leaf nodes of the old graph.
  const ir::OpDef* op = nullptr;
  std::string name;
  Attrs attrs;                // The rewrite adds "fused_nodes", the members' names.
  std::vector<Value> inputs;  // Old values from outside the group, in the op's input order.
  // The old value each output of the new node stands for; invalid for a new value (scratch). A new
  // value that a later group reads gets a NewValueKey, which that group lists among its inputs.
  std::vector<Value> outputs;
  // The node goes where the first member was, not the last: for members whose inputs are all made
  // before it (a multi-tensor cast of parameters; a weight gradient with its bias gradient), whose
  // readers lie anywhere after each member. The group that makes such an input must be placed
  // before it too (GroupFinder checks; the rewrite fails with Internal otherwise).
  bool at_first_member = false;
};

// Names the i-th value that fused groups create in `graph` (none of its own values): a group's
// output standing for it, and a later group's input reading it.
Value NewValueKey(const Graph& graph, int i);

struct RewrittenGraph {
  Graph graph;
  absl::flat_hash_map<Value, Value> values;     // Old value -> new; absent if fused away.
  absl::flat_hash_map<int32_t, int32_t> nodes;  // Old node -> new node (members -> their group).
};

// Who reads each value and which nodes wait on each node, for the group finders.
struct Consumers {
  explicit Consumers(const Graph& graph);
  absl::flat_hash_map<Value, std::vector<int32_t>> readers;
  std::vector<std::vector<int32_t>> control_successors;
};

// True when `members` can become one node placed at its last member: no other node between its
// first and last member reads a member's value or waits for a member (else the new node would
// have to run both before and after that node).
bool Placeable(const Graph& graph, const Consumers& consumers,
               const absl::flat_hash_set<int32_t>& members);

// True when `group` can become one node at its place (NodeGroup::at_first_member: its first
// member's, every member's input a leaf or a node's before it, and no member waiting on a node;
// else its last member's, as Placeable says).
bool GroupPlaceable(const Graph& graph, const Consumers& consumers, const NodeGroup& group);

// Adds a copy of leaf `node` (input, parameter, state or constant) to `g`.
absl::StatusOr<Value> CopyLeaf(Graph& g, const Node& node);

// Rebuilds `graph`: every leaf first, then the other nodes in order, each group replaced by one
// node at its last member's position.
// InvalidArgument if groups overlap, a group is not Placeable, or a member's value read outside
// its group (or listed in `kept`) is not among the group's outputs. A reader in another group
// reads only that group's inputs: a value it read before fusion but no longer does need not be
// an output.
absl::StatusOr<RewrittenGraph> ReplaceGroups(const Graph& graph, absl::Span<const NodeGroup> groups,
                                             absl::Span<const Value> kept);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_REWRITE_H_
