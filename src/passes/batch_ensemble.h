// Ensemble batching: K structurally identical models with different weights, trained in one graph,
// become one model whose every layer runs once for all K. Training K small MLPs one by one
// launches K small GEMMs per layer, each far too small to fill a GPU; batched, each layer is one
// strided-batched GEMM over weights stacked [K, ...].
//
// The pass rewrites the forward graph before autodiff, so the backward pass (dgrad and wgrad),
// fusion, the schedule, the memory plan and the optimizer all see the batched ops and come out
// batched with no work of their own. It finds branches by structure, not by names, so it batches
// the same way whether the user called models::Ensemble() or built K models by hand:
//
//   - a branch is the cone of a root node (everything the root is computed from): its ops, and
//     the inputs, parameters and constants it reads. Branches batch together when their cones are
//     isomorphic (same ops, attributes, shapes and dtypes, wired the same way), disjoint (no node
//     or parameter shared; an input or constant is either every model's own or read by all of
//     them, as when every model trains on the same batch: it is then tiled [K, ...] by a
//     model_tile node), and only the root's value leaves the cone;
//   - the root's value may be kept (fetched, the loss) or read by a tree of scalar adds, the usual
//     sum of the models' losses, which becomes a model_sum of the batched [K] losses;
//   - every op of a branch must have a batched form: matmul -> batched_matmul, bias_add ->
//     batched_bias_add, softmax_cross_entropy -> batched_softmax_cross_entropy, and element-wise
//     pointwise ops (relu, add, ...) as they are on the stacked tensors;
//   - each model's own leaf becomes one stacked leaf [K, ...] named "<common prefix>*<common
//   suffix>" of the
//     members' names ("m*.fc0.weight" for "m0.fc0.weight" ... "m31.fc0.weight"), which the
//     Trainer still answers to by the members' names (StackedLeaf, ModelTensorNames).
//
// Branches that differ in any op or shape stay as they were, as do groups smaller than
// min_models. Candidate groups are taken most models first, then largest cone first, so K models
// batch at the level of whole models even when their layers also match each other.
#ifndef REPRISE_SRC_PASSES_BATCH_ENSEMBLE_H_
#define REPRISE_SRC_PASSES_BATCH_ENSEMBLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"

namespace reprise::passes {

struct EnsembleOptions {
  // Groups of fewer models stay unbatched. Two already pays on a GPU: K launches of a small GEMM
  // become one, and a small GEMM leaves most of an H100 idle whatever K is. Raise it if a
  // measurement (reprise-bench --model ensemble) says otherwise for your shapes.
  int min_models = 2;
};

// A value of the rewritten graph: the whole value (model -1), or model `model`'s slice of a
// stacked value [K, ...].
struct ModelValue {
  Value value;
  int64_t model = -1;
};

// A stacked leaf and the leaves of the original graph it replaces, model k's slice being
// members[k]: its name, and how it starts (inputs: their default value).
struct StackedLeaf {
  std::string name;
  struct Member {
    std::string name;
    Initializer init;
  };
  std::vector<Member> members;
};

// One batched group, for dumps and tests.
struct EnsembleGroup {
  int64_t models = 0;
  std::vector<std::string> roots;  // The root node of each model's branch, in model order.
  int nodes_per_model = 0;         // Non-leaf nodes of one branch.
};

struct BatchedGraph {
  Graph graph;
  Value loss;               // The loss, in `graph` (never a slice: a scalar).
  std::vector<Value> kept;  // The `keep` values' whole (stacked) values, in order.
  // Every value of the original graph -> its value here, except the adds of a rewritten sum of
  // losses, which no longer exist.
  absl::flat_hash_map<Value, ModelValue> values;
  std::vector<StackedLeaf> stacked;  // In the order the rewritten graph declares them.
  std::vector<EnsembleGroup> groups;
  // Why candidate groups were left alone: "<root names>: <reason>".
  std::vector<std::string> declined;

  // `old`'s value here. NotFound for an add of a rewritten sum (fetch the total instead);
  // InvalidArgument when `old` is not a value of the original graph.
  absl::StatusOr<ModelValue> Map(Value old) const;
};

// Batches `graph` as described above. `keep`: values that must stay readable after the step.
// InvalidArgument when `loss` or a `keep` value is not in `graph`; a graph with nothing to
// batch comes back unchanged (every value mapped to itself).
absl::StatusOr<BatchedGraph> BatchEnsembles(const Graph& graph, Value loss,
                                            absl::Span<const Value> keep,
                                            const EnsembleOptions& options = {});

// The initial value of a stacked leaf of spec `spec`: model k's slice filled as members[k]'s
// initializer would fill it under its own name, so a batched step starts from the very weights
// the unbatched one would.
ir::HostTensor InitialStackedValue(const StackedLeaf& leaf, const TensorSpec& spec, uint64_t seed);

// One persistent tensor of a model, addressed by its own name: slice `model` of tensor `stacked`.
struct ModelTensor {
  std::string name;
  std::string stacked;
  int64_t model = 0;
};

// The per-model names of the stacked tensors of `graph` (a graph built from `batched`, such as
// its training graph): each member of each stacked leaf (inputs included), and for every other
// parameter or state tensor named
// "<stacked leaf>.<suffix>" of the stacked leaf's shape (optimizer state: "<w>.momentum"),
// "<member>.<suffix>". In the order of `graph`'s nodes, models in order.
std::vector<ModelTensor> ModelTensorNames(const Graph& graph, const BatchedGraph& batched);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_BATCH_ENSEMBLE_H_
