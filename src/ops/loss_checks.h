// The shape rule the softmax cross-entropy family shares (loss.cc, masked_loss.cc and the
// ensembles' batched_loss.cc): float logits [..., C] with int32 labels [...] of the same leading
// dimensions (the batch; for an ensemble, the models and the batch).
#ifndef REPRISE_SRC_OPS_LOSS_CHECKS_H_
#define REPRISE_SRC_OPS_LOSS_CHECKS_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"

namespace reprise::ops {

// in[0]: logits of rank label_rank + 1; in[1]: labels of rank label_rank. InvalidArgument naming
// both specs otherwise.
absl::Status CheckLogitsAndLabels(absl::Span<const TensorSpec> in, int label_rank = 1);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LOSS_CHECKS_H_
