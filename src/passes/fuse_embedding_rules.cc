// Fusion rule for a tied embedding: its table's two gradients, the embedding's and the output
// product's, summed in the embedding gradient's pass over the table.
#include "absl/strings/str_cat.h"
#include "src/ops/ops.h"
#include "src/ops/resize_rows.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse_rules.h"

namespace reprise::passes {

// add(embedding_grad, other), where the add alone reads the embedding gradient, becomes
// embedding_grad_add reading `other`; where `other` is a resize_rows that only drops rows (a
// padded vocabulary's gradient cut back to the table) and only the add reads it, the resize goes
// too and the fused node reads its input's first rows. With `in_place`, where CanWriteOver allows
// it (nothing reads the gradient added to afterwards, no collective averages the sum), the sum
// is written over that gradient (embedding_grad_accumulate): only the rows tokens name are
// touched.
void GroupFinder::EmbeddingGradientSums(bool in_place) {
  for (const Node& add : g_.nodes()) {
    if (add.op != &ops::AddOp() || taken_[add.id]) continue;
    for (int side = 0; side < 2; ++side) {
      const Value dtable = add.inputs[side], other = add.inputs[1 - side];
      const Node& grad = g_.node(dtable.node);
      if (grad.op != &ops::EmbeddingGradOp() || taken_[grad.id] || SoleReader(dtable) != &add ||
          other == dtable || !(g_.spec(other) == g_.spec(dtable)))
        continue;
      std::vector<int32_t> members = {grad.id, add.id};
      Value base = other;
      const Node* base_reader = &add;  // The member that reads `base`.
      const Node& resize = g_.node(other.node);
      if (resize.op == &ops::ResizeRowsOp() && !taken_[resize.id] && SoleReader(other) == &add) {
        const TensorSpec& padded = g_.spec(resize.inputs[0]);
        if (padded.shape.rank() == 2 && padded.shape.dim(0) >= g_.spec(other).shape.dim(0)) {
          members.push_back(resize.id);
          base = resize.inputs[0];
          base_reader = &resize;
        }
      }
      const bool over = in_place && CanWriteOver(base, Value{add.id, 0}, grad, *base_reader);
      if (TryAdd({.members = std::move(members),
                  .op = over ? &ops::EmbeddingGradAccumulateOp() : &ops::EmbeddingGradAddOp(),
                  .name = absl::StrCat(grad.name, "+", add.name),
                  .attrs = grad.attrs,
                  .inputs = {grad.inputs[0], grad.inputs[1], base},
                  .outputs = {Value{add.id, 0}}}))
        break;
    }
  }
}

}  // namespace reprise::passes
