// Fusion rules that fold work into library calls: cuBLASLt GEMM epilogues (bias, ReLU, ReLU
// backward) and cuDNN's data gradient summed with a residual branch's gradient.
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ops/batch_norm.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// A residual block's input gradient, add(conv2d_dgrad(dy, w), acc), as one cuDNN call that adds
// acc to the data gradient: no separate add reading both and writing a third tensor.
//   in place (conv2d_dgrad_accumulate, the legacy API's beta = 1): only where acc is a transient
//     value that nothing reads after the add (each of its other readers is something the data
//     gradient depends on), as the memory plan requires of a value written over;
//   apart (conv2d_dgrad_add, cuDNN's graph API): the sum has memory of its own, so acc may be any
//     value of the same spec.
void GroupFinder::ConvDgradAccumulations(bool apart) {
  for (const Node& add : g_.nodes()) {
    if (add.op != &ops::AddOp() || taken_[add.id]) continue;
    for (int side = 0; side < 2; ++side) {
      const Value d = add.inputs[side], acc = add.inputs[1 - side];
      const Node& dgrad = g_.node(d.node);
      if (dgrad.op != &ops::Conv2dDgradOp() || taken_[dgrad.id] || SoleReader(d) != &add ||
          acc == d || g_.spec(acc) != g_.spec(d)) {
        continue;
      }
      if (!apart && !CanWriteOver(acc, Value{add.id, 0}, dgrad, add)) continue;
      if (TryAdd({.members = {dgrad.id, add.id},
                  .op = apart ? &ops::Conv2dDgradAddOp() : &ops::Conv2dDgradAccumulateOp(),
                  .name = absl::StrCat(dgrad.name, "+", add.name),
                  .attrs = dgrad.attrs,
                  .inputs = {dgrad.inputs[0], dgrad.inputs[1], acc},
                  .outputs = {Value{add.id, 0}}}))
        break;
    }
  }
}

// Whether `sum` may be written over acc: both transient and not kept, acc's readers other than
// `reader` all before `first`, and neither placed by a collective (which lays the values it
// reduces side by side, as the memory plan does not lay a value written over another).
bool GroupFinder::CanWriteOver(Value acc, Value sum, const Node& first, const Node& reader) const {
  if (ir::IsLeaf(g_.node(acc.node)) || kept_.contains(acc) || kept_.contains(sum)) return false;
  for (int32_t r : Readers(acc)) {
    if (r != reader.id && !DependsOn(first.id, r)) return false;
  }
  for (Value v : {acc, sum}) {
    for (int32_t r : Readers(v)) {
      if (g_.node(r).op->kind == ir::OpKind::kCommunication) return false;
    }
  }
  return true;
}

void GroupFinder::GemmEpilogues(bool relu_backward) {
  for (const Node& mm : g_.nodes()) {
    if (mm.op != &ops::MatmulOp() || taken_[mm.id]) continue;
    const Node* bias = SoleReader(Value{mm.id, 0});
    if (bias == nullptr || bias->op != &ops::BiasAddOp() || bias->inputs[0] != Value{mm.id, 0})
      continue;
    const Node* relu = SoleReader(Value{bias->id, 0});
    if (relu != nullptr && relu->op != &ops::ReluOp()) relu = nullptr;
    const Node& last = relu ? *relu : *bias;
    NodeGroup group{.members = {mm.id, bias->id},
                    .op = &ops::MatmulBiasOp(),
                    .name = absl::StrCat(mm.name, "+bias", relu ? "+relu" : ""),
                    .attrs = TransposeAttrs(mm),
                    .inputs = {mm.inputs[0], mm.inputs[1], bias->inputs[1]},
                    .outputs = {Value{last.id, 0}}};
    group.attrs["relu"] = relu != nullptr;
    if (relu) group.members.push_back(relu->id);
    if (relu && relu_backward && ReluBackwardEpilogue(group, *relu)) continue;
    TryAdd(std::move(group));
  }
}

// The layer's backward, relu_grad(dh, h) and the bias gradient column_sum(dz), folded into the
// data-gradient matmul that makes dh: `forward` becomes matmul_bias_relu_mask, whose mask the
// backward's matmul_drelu_bgrad reads. float32 only (the bfloat16 step keeps its bias gradients
// in the unfused kernels' precision).
bool GroupFinder::ReluBackwardEpilogue(NodeGroup& forward, const Node& relu) {
  const Value h{relu.id, 0};
  if (g_.spec(h).dtype != DType::kFloat32) return false;
  for (int32_t r : Readers(h)) {
    const Node& grad = g_.node(r);
    if (grad.op != &ops::ReluGradOp() || taken_[r] || grad.inputs[1] != h) continue;
    const Value dh = grad.inputs[0];
    const Node& product = g_.node(dh.node);
    if (product.op != &ops::MatmulOp() || taken_[product.id] || SoleReader(dh) != &grad ||
        !(g_.spec(dh) == g_.spec(h)))
      continue;
    const Node* column_sum = nullptr;
    for (int32_t s : Readers(Value{grad.id, 0})) {
      if (g_.node(s).op == &ops::ColumnSumOp() && !taken_[s]) column_sum = &g_.node(s);
    }
    if (column_sum == nullptr) continue;
    const Value mask = NewValueKey(g_, new_values_);
    NodeGroup backward{.members = {product.id, grad.id, column_sum->id},
                       .op = &ops::MatmulDReluBiasGradOp(),
                       .name = absl::StrCat(product.name, "+", grad.name, "+bias_grad"),
                       .attrs = TransposeAttrs(product),
                       .inputs = {product.inputs[0], product.inputs[1], mask},
                       .outputs = {Value{grad.id, 0}, Value{column_sum->id, 0}}};
    NodeGroup masked = forward;
    masked.op = &ops::MatmulBiasReluMaskOp();
    masked.name += "+mask";
    masked.attrs.erase("relu");
    masked.outputs.push_back(mask);
    const absl::flat_hash_set<int32_t> fwd(masked.members.begin(), masked.members.end());
    const absl::flat_hash_set<int32_t> bwd(backward.members.begin(), backward.members.end());
    if (!Placeable(g_, consumers_, fwd) || !Placeable(g_, consumers_, bwd)) continue;
    ++new_values_;
    TryAdd(std::move(masked));
    TryAdd(std::move(backward));
    return true;
  }
  return false;
}

}  // namespace reprise::passes
