// The shape rule the softmax cross-entropy family shares (loss.cc, with the ensembles' forms, and
// masked_loss.cc): float logits [..., C] with int32 labels [...] of the same leading
// dimensions (the batch; for an ensemble, the models and the batch).
#ifndef REPRISE_SRC_OPS_LOSS_CHECKS_H_
#define REPRISE_SRC_OPS_LOSS_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"

namespace reprise::ops {

// in[0]: logits of rank label_rank + 1; in[1]: labels of rank label_rank. InvalidArgument naming
// both specs otherwise.
absl::Status CheckLogitsAndLabels(absl::Span<const TensorSpec> in, int label_rank = 1);

// The real classes of softmax_cross_entropy (and its gradient and fused pair): the int attribute
// "classes", the first columns of logits [B, C]; the columns from it on pad the logits (a
// vocabulary padded for aligned products) and take no part: no probability, a gradient of
// exactly 0, and a label must be below it. Absent: every column is a class. InvalidArgument for
// a non-integer attribute or a value outside [1, C].
inline constexpr char kLossClassesAttr[] = "classes";
absl::StatusOr<int64_t> LossClasses(const Attrs& attrs, const TensorSpec& logits);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LOSS_CHECKS_H_
