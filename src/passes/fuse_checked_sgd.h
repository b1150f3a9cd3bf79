// The non-finite guard's check in the update's launch (FuseOptions::sgd_checks_in_launch).
//
// Guarded, a step's SGD updates wait for grad_nonfinite (one flag per chunk of the gradients and
// the loss) and loss_scale_check (one block turning the flags into the verdict and moving the
// counters on): two launches between the last gradient and the update, on the step's critical
// path. sgd_multi with attr checks does both in its own launch: its blocks test the chunks they
// are about to update, meet on a grid barrier (a cooperative launch, its words a state of the
// graph), and update or skip together; block 0 writes the check the rest of the step reads.
#ifndef REPRISE_SRC_PASSES_FUSE_CHECKED_SGD_H_
#define REPRISE_SRC_PASSES_FUSE_CHECKED_SGD_H_

#include <vector>

#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// Folds grad_nonfinite -> loss_scale_check (the guard's, attr count) into the one sgd_multi group
// of `groups` (found in `graph`) that reads the check, where that check reads all its gradients
// and at most one more tensor (the loss) of at most codegen::kNormChunk elements, nothing else
// reads the flags, the group has no clip and at most codegen::kMaxMultiTensorCapacity tensors,
// and the new node can take the group's place. Its barrier words become a state of `source` (a
// copy of `graph` that the groups are applied to). Leaves everything as it was otherwise.
void FoldGuardIntoSgdLaunch(Graph& source, const Graph& graph, std::vector<NodeGroup>& groups);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_CHECKED_SGD_H_
