// Fusion of the batched ops of ensemble batching (src/passes/batch_ensemble.h), beside the fuse
// pass's groups of unbatched ops (src/passes/fuse.h):
//   batched_matmul -> batched_bias_add [-> relu]        => batched_matmul_bias (cuBLASLt bias
//                                                          epilogue with a bias batch stride)
//   batched_softmax_cross_entropy -> model_sum, and     => batched_softmax_cross_entropy_with_grad
//     model_broadcast -> its gradient                      (the losses, their sum, the gradient)
//   relu_grad -> batched_column_sum                    => batched_relu_grad_bias_grad
#ifndef REPRISE_SRC_PASSES_FUSE_BATCHED_H_
#define REPRISE_SRC_PASSES_FUSE_BATCHED_H_

#include <vector>

#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/passes/fuse.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// Appends to `groups` the batched groups of `graph` that `options` allows (gemm_epilogues,
// loss_with_grad, pointwise_chains), leaving out any node already in one of `groups`. `kept`
// values stay readable.
void AddBatchedGroups(const Graph& graph, absl::Span<const Value> kept, const FuseOptions& options,
                      std::vector<NodeGroup>& groups);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_BATCHED_H_
