// Fusion rules for layer normalization: the residual add before it, and its input gradient summed
// with the residual stream's.
#include "absl/strings/str_cat.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse_rules.h"

namespace reprise::passes {

const Node* GroupFinder::FreeColumnSumOf(Value v) const {
  for (int32_t r : Readers(v)) {
    const Node& sum = g_.node(r);
    if (sum.op == &ops::ColumnSumOp() && !taken_[r]) return &sum;
  }
  return nullptr;
}

// add(layer_norm_grad's dx, other), where the add alone reads dx, becomes layer_norm_grad_add:
// the dx kernel adds `other` before its one store. The other gradient is only read. With
// `bias_sums`, a column_sum of the result (the bias gradient of the projection whose output
// gradient it is) joins them as layer_norm_grad_column_sum, at the column sum's place.
void GroupFinder::LayerNormResidualGradients(bool bias_sums) {
  for (const Node& add : g_.nodes()) {
    if (add.op != &ops::AddOp() || taken_[add.id]) continue;
    for (int side = 0; side < 2; ++side) {
      const Value dx = add.inputs[side], other = add.inputs[1 - side];
      const Node& grad = g_.node(dx.node);
      if (grad.op != &ops::LayerNormGradOp() || taken_[grad.id] || dx.output != 0 ||
          SoleReader(dx) != &add || other == dx || !(g_.spec(other) == g_.spec(dx)))
        continue;
      std::vector<Value> inputs(grad.inputs.begin(), grad.inputs.end());
      inputs.push_back(other);
      NodeGroup group{.members = {grad.id, add.id},
                      .op = &ops::LayerNormGradAddOp(),
                      .name = absl::StrCat(grad.name, "+", add.name),
                      .attrs = grad.attrs,
                      .inputs = std::move(inputs),
                      .outputs = {Value{add.id, 0}, Value{grad.id, 1}, Value{grad.id, 2}}};
      if (const Node* sum = bias_sums ? FreeColumnSumOf(Value{add.id, 0}) : nullptr) {
        NodeGroup with_sum = group;
        with_sum.members.push_back(sum->id);
        with_sum.op = &ops::LayerNormGradColumnSumOp();
        with_sum.name = absl::StrCat(group.name, "+", sum->name);
        with_sum.outputs.push_back(Value{sum->id, 0});
        if (TryAdd(std::move(with_sum))) break;
      }
      if (TryAdd(std::move(group))) break;
    }
  }
}

// layer_norm_grad whose dx a column_sum reads (the last layer's projection bias, before the final
// layer norm) becomes layer_norm_grad_column_sum, as above; after LayerNormResidualGradients.
void GroupFinder::LayerNormGradientColumnSums() {
  for (const Node& grad : g_.nodes()) {
    if (grad.op != &ops::LayerNormGradOp() || taken_[grad.id]) continue;
    const Node* sum = FreeColumnSumOf(Value{grad.id, 0});
    if (sum == nullptr) continue;
    TryAdd(
        {.members = {grad.id, sum->id},
         .op = &ops::LayerNormGradColumnSumOp(),
         .name = absl::StrCat(grad.name, "+", sum->name),
         .attrs = grad.attrs,
         .inputs = grad.inputs,
         .outputs = {Value{grad.id, 0}, Value{grad.id, 1}, Value{grad.id, 2}, Value{sum->id, 0}}});
  }
}

// add -> layer_norm becomes add_layer_norm, which writes the sum (read on by the residual stream
// and by the backward) and the normalised output in one pass over the row.
void GroupFinder::LayerNormResidualAdds() {
  for (const Node& ln : g_.nodes()) {
    if (ln.op != &ops::LayerNormOp() || taken_[ln.id]) continue;
    const Node& add = g_.node(ln.inputs[0].node);
    if (add.op != &ops::AddOp() || taken_[add.id]) continue;
    TryAdd({.members = {add.id, ln.id},
            .op = &ops::AddLayerNormOp(),
            .name = absl::StrCat(add.name, "+", ln.name),
            .attrs = ln.attrs,
            .inputs = {add.inputs[0], add.inputs[1], ln.inputs[1], ln.inputs[2]},
            .outputs = {Value{add.id, 0}, Value{ln.id, 0}, Value{ln.id, 1}, Value{ln.id, 2}}});
  }
}

}  // namespace reprise::passes
