// masked_softmax_cross_entropy: softmax cross-entropy that leaves out the rows a batch was padded
// with (label kPaddingLabel), so a batch padded to a shape bucket trains as the batch itself.
#ifndef REPRISE_SRC_OPS_MASKED_LOSS_H_
#define REPRISE_SRC_OPS_MASKED_LOSS_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// The label of a padded row: nn::kPaddingLabel (reprise/nn.h; src/api/nn.cc checks they agree).
inline constexpr int32_t kPaddingLabel = -1;

// (logits f32 [B, C], labels i32 [B]) -> f32 []: the mean of -log softmax(logits)[label] over
// the rows whose label is not kPaddingLabel (0 when every row is padding).
const ir::OpDef& MaskedSoftmaxCrossEntropyOp();
// (logits, labels, dloss f32 []) -> f32 [B, C]: its gradient; zero on padded rows.
const ir::OpDef& MaskedSoftmaxCrossEntropyGradOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MASKED_LOSS_H_
