// Fusion of the batched ops of ensemble batching (src/passes/batch_ensemble.h), beside the fuse
// pass's groups of unbatched ops (src/passes/fuse.h):
//   batched_matmul -> batched_bias_add [-> relu]        => batched_matmul_bias (cuBLASLt bias
//                                                          epilogue with a bias batch stride)
#ifndef REPRISE_SRC_PASSES_FUSE_BATCHED_H_
#define REPRISE_SRC_PASSES_FUSE_BATCHED_H_

#include <vector>

#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/passes/fuse.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// Appends to `groups` the batched groups of `graph` that FuseOptions allows (gemm_epilogues),
// leaving out any node already in one of `groups`. `kept` values stay readable.
void AddBatchedGroups(const Graph& graph, absl::Span<const Value> kept, const FuseOptions& options,
                      std::vector<NodeGroup>& groups);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_BATCHED_H_
