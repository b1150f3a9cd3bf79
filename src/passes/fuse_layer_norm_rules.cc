// Fusion rules for layer normalization: its input gradient summed with the residual stream's.
#include "absl/strings/str_cat.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse_rules.h"

namespace reprise::passes {

// add(layer_norm_grad's dx, other), where the add alone reads dx, becomes layer_norm_grad_add:
// the dx kernel adds `other` before its one store. The other gradient is only read.
void GroupFinder::LayerNormResidualGradients() {
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
      if (TryAdd({.members = {grad.id, add.id},
                  .op = &ops::LayerNormGradAddOp(),
                  .name = absl::StrCat(grad.name, "+", add.name),
                  .attrs = grad.attrs,
                  .inputs = std::move(inputs),
                  .outputs = {Value{add.id, 0}, Value{grad.id, 1}, Value{grad.id, 2}}}))
        break;
    }
  }
}

}  // namespace reprise::passes
