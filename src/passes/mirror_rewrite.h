// The graph rewrite behind backward mirroring (src/passes/mirror.h): given forward nodes to
// recompute, a copy of the training graph in which each of them has a recomputed twin,
// "<name>.mirror", placed just before its first reader in the backward pass, and every backward
// reader of the original reads the twin instead. The original then dies with its last forward
// reader; the twin lives only from its placement to its last backward reader.
#ifndef REPRISE_SRC_PASSES_MIRROR_REWRITE_H_
#define REPRISE_SRC_PASSES_MIRROR_REWRITE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/autodiff/autodiff.h"

namespace reprise::passes {

// Whether a forward node is cheap to recompute and free of side effects: pointwise ops (relu,
// add, bias_add, dropout, which draws the same mask from the same step counter, gelu, ...), max
// pooling, batch_norm_train, whose output y is recomputed from the saved statistics by
// batch_norm_apply (neither reducing again nor touching the running statistics), and
// layer_norm, whose twin is a layer_norm of the same input and weights (one pass over a row,
// the same kernel: the same bits). Matmuls, convolutions and other reductions are not.
bool Recomputable(const Node& node);

// Whether output `output` of `node` is one its twin replaces: y alone for batch_norm_train and
// layer_norm (the saved statistics, which their gradients read, stay as they are), every output
// otherwise.
bool IsMirroredOutput(const Node& node, int output);

struct MirroredGraph {
  autodiff::TrainingGraph training;  // Forward node ids are kept; later ones move.
  // (original, twin) names, in the twins' order in the graph.
  std::vector<std::pair<std::string, std::string>> mirrors;
};

// Rebuilds `training` with a twin of every node in `nodes` that the backward pass (or another
// twin) reads; a node nobody would read gets none. Twins read the twins of their inputs where
// those have one. A twin that reads a leaf some node writes in place (a bias the optimizer
// updates, the dropout step counter) runs before that writer: a control edge says so. Each twin
// also waits for the readers of the twins before it, and so does the next backward node that is
// not a weight gradient, so that a reader on another lane (a weight gradient) cannot keep their
// memory from being reused for the rest of the step: a twin only weight gradients read runs on
// their lane (src/passes/schedule.h), so its own wait orders nothing on the data-gradient lane.
// InvalidArgument naming the node when one is not a recomputable forward node, or when a writer
// of its leaf inputs would run before its twin. Deterministic.
absl::StatusOr<MirroredGraph> RewriteMirrored(const autodiff::TrainingGraph& training,
                                              const absl::flat_hash_set<int32_t>& nodes);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_MIRROR_REWRITE_H_
