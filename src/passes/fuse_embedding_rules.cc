// Fusion rules for embeddings: a tied embedding's two gradients, the embedding's and the output
// product's, summed in the embedding gradient's pass over the table; and in mixed precision the
// gather of a float32 table's rows, rounded as they are gathered, instead of a gather from the
// table's 16-bit copy.
#include <string>

#include "absl/strings/str_cat.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/ops/resize_rows.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse_rules.h"

namespace reprise::passes {

// add(embedding_grad, other), where the add alone reads the embedding gradient, becomes
// embedding_grad_add reading `other`; where `other` is a resize_rows that only drops rows (a
// padded vocabulary's gradient cut back to the table) and only the add reads it, the resize goes
// too and the fused node reads its input's first rows.
void GroupFinder::EmbeddingGradientSums() {
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
      const Node& resize = g_.node(other.node);
      if (resize.op == &ops::ResizeRowsOp() && !taken_[resize.id] && SoleReader(other) == &add) {
        const TensorSpec& padded = g_.spec(resize.inputs[0]);
        if (padded.shape.rank() == 2 && padded.shape.dim(0) >= g_.spec(other).shape.dim(0)) {
          members.push_back(resize.id);
          base = resize.inputs[0];
        }
      }
      if (TryAdd({.members = std::move(members),
                  .op = &ops::EmbeddingGradAddOp(),
                  .name = absl::StrCat(grad.name, "+", add.name),
                  .attrs = grad.attrs,
                  .inputs = {grad.inputs[0], grad.inputs[1], base},
                  .outputs = {Value{add.id, 0}}}))
        break;
    }
  }
}

// embedding(ids, cast(parameter)), a float32 parameter's 16-bit copy, becomes embedding(ids,
// parameter) with attr dtype: the same bits (rounding commutes with gathering), and the step's
// first launch on lane 0 no longer waits for the table's copy, which another reader (a tied output
// product) may still need later. The cast goes too where the embedding alone reads it.
void GroupFinder::EmbeddingsOfParameterCopies() {
  for (const Node& embedding : g_.nodes()) {
    if (embedding.op != &ops::EmbeddingOp() || taken_[embedding.id] ||
        embedding.attrs.contains("dtype")) {
      continue;
    }
    const Node& cast = g_.node(embedding.inputs[1].node);
    if (cast.op != &ops::CastOp() || taken_[cast.id] || !cast.control_inputs.empty()) continue;
    const Value table = cast.inputs[0];
    const DType to = cast.outputs[0].dtype;
    if (g_.node(table.node).op != &ir::ParameterOp() || g_.spec(table).dtype != DType::kFloat32 ||
        !IsLowPrecision(to)) {
      continue;
    }
    std::vector<int32_t> members = {embedding.id};
    if (SoleReader(embedding.inputs[1]) == &embedding) members.insert(members.begin(), cast.id);
    Attrs attrs = embedding.attrs;
    attrs["dtype"] = ops::DTypeAttr(to);
    TryAdd({.members = std::move(members),
            .op = &ops::EmbeddingOp(),
            .name = embedding.name,
            .attrs = std::move(attrs),
            .inputs = {embedding.inputs[0], table},
            .outputs = {Value{embedding.id, 0}}});
  }
}

}  // namespace reprise::passes
