// Fusion rules that fold a transformer MLP's pointwise work into its cuBLASLt products: the GELU
// layer (bias, GELU, and in the backward GELU's derivative), the projection added to the residual
// stream, and a layer's bias gradient into its weight gradient.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/ops/matmul_gelu.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/schedule.h"

namespace reprise::passes {

// matmul -> bias_add -> gelu becomes matmul_bias_gelu_aux, which also writes the pre-activation
// (the bias_add's value) that gelu_grad reads; with `backward_too`, where that gelu_grad reads a
// data-gradient matmul, the two become matmul_dgelu, and the bias gradient's column_sum stays a
// node of its own, on the weight-gradient lane (otherwise the pointwise-chain rule takes gelu_grad
// and the bias gradient into one kernel on the data-gradient lane). Widths that are not a
// multiple of 8 (cuBLASLt's GELU aux layout) stay unfused.
void GroupFinder::GeluEpilogues(bool backward_too) {
  for (const Node& mm : g_.nodes()) {
    if (mm.op != &ops::MatmulOp() || taken_[mm.id]) continue;
    const Node* bias = SoleReader(Value{mm.id, 0});
    if (bias == nullptr || bias->op != &ops::BiasAddOp() || bias->inputs[0] != Value{mm.id, 0})
      continue;
    const Value pre{bias->id, 0};
    if (g_.spec(pre).shape.dim(1) % 8 != 0) continue;
    const Node* gelu = nullptr;
    for (int32_t r : Readers(pre)) {
      if (g_.node(r).op == &ops::GeluOp() && !taken_[r]) gelu = &g_.node(r);
    }
    if (gelu == nullptr) continue;
    NodeGroup forward{.members = {mm.id, bias->id, gelu->id},
                      .op = &ops::MatmulBiasGeluAuxOp(),
                      .name = absl::StrCat(mm.name, "+bias+gelu"),
                      .attrs = TransposeAttrs(mm),
                      .inputs = {mm.inputs[0], mm.inputs[1], bias->inputs[1]},
                      .outputs = {Value{gelu->id, 0}, pre}};
    if (std::optional<NodeGroup> backward = backward_too ? GeluBackward(pre) : std::nullopt;
        backward.has_value()) {
      if (TryAddAll({forward, *std::move(backward)})) continue;
    }
    TryAdd(std::move(forward));
  }
}

std::optional<NodeGroup> GroupFinder::GeluBackward(Value pre) const {
  for (int32_t r : Readers(pre)) {
    const Node& grad = g_.node(r);
    if (grad.op != &ops::GeluGradOp() || taken_[r] || grad.inputs[1] != pre) continue;
    const Value dh = grad.inputs[0];
    const Node& product = g_.node(dh.node);
    if (product.op != &ops::MatmulOp() || taken_[product.id] || SoleReader(dh) != &grad ||
        !(g_.spec(dh) == g_.spec(pre)))
      continue;
    return NodeGroup{.members = {product.id, grad.id},
                     .op = &ops::MatmulDGeluOp(),
                     .name = absl::StrCat(product.name, "+", grad.name),
                     .attrs = TransposeAttrs(product),
                     .inputs = {product.inputs[0], product.inputs[1], pre},
                     .outputs = {Value{grad.id, 0}}};
  }
  return std::nullopt;
}

// matmul -> bias_add -> add(·, residual), the product and bias read by nothing else, becomes
// matmul_bias_residual: cuBLASLt reads the residual as its C (beta = 1) and writes the sum, so no
// separate add reads both and writes a third tensor. The residual is only read, so the memory
// plan needs no in-place accumulation.
void GroupFinder::ResidualEpilogues() {
  for (const Node& mm : g_.nodes()) {
    if (mm.op != &ops::MatmulOp() || taken_[mm.id]) continue;
    const Node* bias = SoleReader(Value{mm.id, 0});
    if (bias == nullptr || bias->op != &ops::BiasAddOp() || bias->inputs[0] != Value{mm.id, 0})
      continue;
    const Value biased{bias->id, 0};
    const Node* add = SoleReader(biased);
    if (add == nullptr || add->op != &ops::AddOp()) continue;
    const Value residual = add->inputs[0] == biased ? add->inputs[1] : add->inputs[0];
    if (residual == biased || !(g_.spec(residual) == g_.spec(biased))) continue;
    TryAdd({.members = {mm.id, bias->id, add->id},
            .op = &ops::MatmulBiasResidualOp(),
            .name = absl::StrCat(mm.name, "+bias+residual"),
            .attrs = TransposeAttrs(mm),
            .inputs = {mm.inputs[0], mm.inputs[1], bias->inputs[1], residual},
            .outputs = {Value{add->id, 0}}});
  }
}

// A column_sum of dY and a weight-gradient matmul reading the same dY transposed as its A become
// matmul_bgrad: the bias gradient summed by the product's epilogue as it reads dY, instead of a
// launch of its own reading dY again (on GPT-2, 48 column sums beside the data-gradient lane's
// attention and products, which they slowed). It runs after the pointwise chains, so a column sum
// that ends a chain (a hidden ReLU layer's relu_grad) stays in that chain's kernel.
void GroupFinder::WeightGradientBiasSums() {
  for (const Node& sum : g_.nodes()) {
    if (sum.op != &ops::ColumnSumOp() || taken_[sum.id]) continue;
    const Value dy = sum.inputs[0];
    if (g_.spec(dy).shape.rank() != 2) continue;
    for (int32_t r : Readers(dy)) {
      const Node& mm = g_.node(r);
      if (mm.op != &ops::MatmulOp() || taken_[r] || !IsWeightGradient(mm) || mm.inputs[0] != dy ||
          !ir::BoolAttrOr(mm.attrs, "transpose_a", false))
        continue;
      Attrs attrs = TransposeAttrs(mm);
      attrs["role"] = std::string("wgrad");
      NodeGroup group{.members = {mm.id, sum.id},
                      .op = &ops::MatmulBiasGradOp(),
                      .name = absl::StrCat(mm.name, "+", sum.name),
                      .attrs = std::move(attrs),
                      .inputs = {mm.inputs[0], mm.inputs[1]},
                      .outputs = {Value{mm.id, 0}, Value{sum.id, 0}}};
      if (TryAdd(group)) break;
      // Where a node between the two reads the first's value (a widening cast of a 16-bit
      // gradient), the node goes where the first was, if every input is made before it.
      group.at_first_member = true;
      if (TryAdd(std::move(group))) break;
    }
  }
}

}  // namespace reprise::passes
