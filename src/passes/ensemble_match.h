// The search half of ensemble batching (src/passes/batch_ensemble.h): which branches of a forward
// graph batch together, and which sums of their losses become one model_sum. Host-only analysis;
// nothing here changes the graph.
#ifndef REPRISE_SRC_PASSES_ENSEMBLE_MATCH_H_
#define REPRISE_SRC_PASSES_ENSEMBLE_MATCH_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/op_def.h"

namespace reprise::passes::ensemble {

// K isomorphic, disjoint branches. Model 0's branch is the template: every other model's node for
// a template node (leaves included) is nodes[k].at(template node).
struct Match {
  std::vector<int32_t> roots;                                // One per model, ascending.
  std::vector<absl::flat_hash_map<int32_t, int32_t>> nodes;  // [model]: template -> model's.
  std::vector<int32_t> template_ops;     // Model 0's non-leaf nodes, ascending (topological).
  std::vector<int32_t> template_leaves;  // Model 0's leaves, ascending.
  // Inputs and constants every model reads (the same node in every model), ascending; the
  // other leaves are each model's own.
  std::vector<int32_t> shared_leaves;
};

// Adds of scalars whose only job is to sum values, at least one of them a batched root: the
// usual sum of the models' losses. `root` is the last add; `leaves` are the summed values in
// left-to-right order; `adds` are every add of the tree, `root` included.
struct SumTree {
  int32_t root = -1;
  std::vector<int32_t> adds;
  std::vector<Value> leaves;
};

struct Matches {
  std::vector<Match> groups;
  std::vector<SumTree> trees;
  std::vector<std::string> declined;
};

// The op that computes `node` for K models stacked along a new leading dimension, or null when
// it has none: matmul, bias_add, softmax_cross_entropy, and element-wise pointwise ops, which
// serve as their own batched form.
const ir::OpDef* BatchedOpOf(const Node& node);

// Finds the groups of at least `min_models` branches (see batch_ensemble.h); no branch holds
// `loss`. `kept` are the values that stay readable (the loss among them): a kept add is never
// folded into a sum tree. InvalidArgument when `loss` or a kept value is not in `graph`.
absl::StatusOr<Matches> FindEnsembles(const Graph& graph, Value loss, absl::Span<const Value> kept,
                                      int min_models);

}  // namespace reprise::passes::ensemble

#endif  // REPRISE_SRC_PASSES_ENSEMBLE_MATCH_H_
