// Fusion rules of max pooling: the argmax kept by the forward pooling, and a recomputed
// stem's pooling reading the batch norm's input instead of the ReLU output.
#include "absl/strings/str_cat.h"
#include "src/ops/batch_norm.h"
#include "src/ops/conv.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// A batch norm + ReLU output recomputed by the mirror pass whose readers are one max pooling
// (itself recomputed) and that pooling's gradients, as in a network's stem: the pooling and its
// gradients recompute the window values from the batch norm's input as they read them
// (src/ops/pooling_bn_relu.h), so the ReLU output is never written or read back. Where the GPU
// kernels run only: float32, channels-last, channels a multiple of 4, windows of at most 255.
void GroupFinder::PoolingOfRecomputedActivations() {
  for (const Node& apply : g_.nodes()) {
    if (!PlainApply(apply) || apply.outputs[0].dtype != DType::kFloat32) continue;
    const absl::StatusOr<Layout> layout = ops::LayoutAttr(apply.attrs);
    if (!layout.ok() || *layout != Layout::kNHWC || apply.outputs[0].shape.dim(3) % 4 != 0) {
      continue;
    }
    const Node* relu = SoleReader(Value{apply.id, 0});
    if (relu == nullptr || relu->op != &ops::ReluOp()) continue;
    const Value act{relu->id, 0};
    if (kept_.contains(act)) continue;
    const Node* pool = nullptr;
    std::vector<const Node*> grads;
    bool fusable = true;
    for (int32_t r : Readers(act)) {
      const Node& reader = g_.node(r);
      if (reader.op == &ops::MaxPool2dOp() && pool == nullptr && !taken_[r]) {
        pool = &reader;
      } else if (reader.op == &ops::MaxPool2dGradOp() && !taken_[r] && reader.inputs[1] == act &&
                 reader.inputs[0] != act) {
        grads.push_back(&reader);
      } else if (!ReadFusedAway(r, act)) {
        fusable = false;
      }
    }
    if (!fusable || pool == nullptr) continue;
    const absl::StatusOr<ops::PoolParams> window = ops::PoolParamsOf(pool->attrs);
    if (!window.ok() || window->kh * window->kw > 255) continue;
    const Value pooled{pool->id, 0};
    std::vector<int32_t> pooled_readers = Readers(pooled);
    for (const Node* grad : grads) {
      fusable = fusable && grad->inputs[2] == pooled && grad->attrs == pool->attrs;
      std::erase(pooled_readers, grad->id);
    }
    // The pooled values must still be wanted without the gradients (the weight gradients of the
    // next convolutions read them), or the fused pooling would run for nothing.
    if (!fusable || (pooled_readers.empty() && !kept_.contains(pooled))) continue;
    // The pooling notes each window's argmax for the gradients: a value of the new graph only.
    const Value argmax = NewValueKey(g_, new_values_);
    std::vector<NodeGroup> fused;
    fused.push_back({.members = {apply.id, relu->id, pool->id},
                     .op = &ops::MaxPool2dBnReluOp(),
                     .name = absl::StrCat(apply.name, "+", relu->name, "+", pool->name),
                     .attrs = pool->attrs,
                     .inputs = apply.inputs,
                     .outputs = {pooled, argmax}});
    for (const Node* grad : grads) {
      fused.push_back({.members = {grad->id},
                       .op = &ops::MaxPool2dGradFromArgmaxOp(),
                       .name = absl::StrCat(grad->name, "+", apply.name),
                       .attrs = grad->attrs,
                       .inputs = {grad->inputs[0], argmax, apply.inputs[0]},
                       .outputs = {Value{grad->id, 0}}});
    }
    // All of them or none: a gradient left unfused would read the ReLU output that the fused
    // pooling no longer writes.
    if (TryAddAll(std::move(fused))) ++new_values_;
  }
}

// A forward max pooling whose gradients read its input only to find each window's maximum
// (float32 or 16 bits, channels-last, channels a multiple of 4, windows of at most 255 elements):
// the pooling notes the argmax as it scans (max_pool2d_with_argmax) and the gradients gather from
// it, so the input is not read again in the backward pass. Where that input is a ReLU of a batch
// norm's output (a network's stem), the gradients take their spec from the batch norm's input,
// which the batch norm's gradient keeps alive anyway: the ReLU output then dies in the forward
// pass (the ReLU's gradient reads its mask from the batch norm's input, BatchNormActivations).
void GroupFinder::PoolingArgmaxInForward() {
  for (const Node& pool : g_.nodes()) {
    if (pool.op != &ops::MaxPool2dOp() || taken_[pool.id]) continue;
    const DType dtype = pool.outputs[0].dtype;
    if (dtype != DType::kFloat32 && !IsLowPrecision(dtype)) continue;
    const absl::StatusOr<ops::PoolParams> window = ops::PoolParamsOf(pool.attrs);
    if (!window.ok() || window->layout != Layout::kNHWC || window->kh * window->kw > 255 ||
        pool.outputs[0].shape.dim(3) % 4 != 0) {
      continue;
    }
    const Value x = pool.inputs[0], pooled{pool.id, 0};
    std::vector<const Node*> grads;
    for (int32_t r : Readers(pooled)) {
      const Node& reader = g_.node(r);
      if (reader.op == &ops::MaxPool2dGradOp() && !taken_[r] && reader.inputs[1] == x &&
          reader.inputs[2] == pooled && reader.inputs[0] != x && reader.attrs == pool.attrs) {
        grads.push_back(&reader);
      }
    }
    if (grads.empty()) continue;
    Value spec_of_x = x;
    const Node& producer = g_.node(x.node);
    if (producer.op == &ops::ReluOp()) {
      const Node& bn = g_.node(producer.inputs[0].node);
      if (bn.op == &ops::BatchNormTrainOp() && producer.inputs[0].output == 0 &&
          g_.spec(bn.inputs[0]) == g_.spec(x)) {
        spec_of_x = bn.inputs[0];
      }
    }
    const Value argmax = NewValueKey(g_, new_values_);
    std::vector<NodeGroup> fused;
    fused.push_back({.members = {pool.id},
                     .op = &ops::MaxPool2dWithArgmaxOp(),
                     .name = absl::StrCat(pool.name, "+argmax"),
                     .attrs = pool.attrs,
                     .inputs = {x},
                     .outputs = {pooled, argmax}});
    for (const Node* grad : grads) {
      fused.push_back({.members = {grad->id},
                       .op = &ops::MaxPool2dGradFromArgmaxOp(),
                       .name = absl::StrCat(grad->name, "+argmax"),
                       .attrs = grad->attrs,
                       .inputs = {grad->inputs[0], argmax, spec_of_x},
                       .outputs = {Value{grad->id, 0}}});
    }
    if (TryAddAll(std::move(fused))) ++new_values_;
  }
}

}  // namespace reprise::passes
