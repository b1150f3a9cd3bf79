// Fusion rules of batch normalization: a convolution with the batch norm of its output (cuDNN
// sums the statistics in the convolution's epilogue), batch norm + ReLU (and the residual add)
// forward and backward, and the mirror pass's recomputed batch-norm applies, alone and in chains.
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/conv.h"
#include "src/ops/conv_bn.h"
#include "src/ops/conv_shape.h"
#include "src/ops/ops.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// A forward convolution whose output a training batch norm normalises, with that batch norm (and
// its residual add and ReLU, as BatchNormActivations would take them): one conv2d_bn_train node.
// The convolution's output stays a value of the group (the batch norm's gradient reads it).
// Only where cuDNN has engines for the fusion (ops::ConvBatchNormStatsSupport: float16 NHWC);
// whether it has a plan at the node's shape is asked when the node is lowered, and where it has
// none the node runs the two lowerings.
void GroupFinder::ConvBatchNormStats() {
  const auto layout = [](const Attrs& attrs) {
    auto it = attrs.find("layout");
    const std::string* name = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    return name == nullptr ? std::string("NCHW") : *name;
  };
  for (const Node& bn : g_.nodes()) {
    if (bn.op != &ops::BatchNormTrainOp() || taken_[bn.id]) continue;
    const Value x = bn.inputs[0];
    const Node& conv = g_.node(x.node);
    if (conv.op != &ops::Conv2dOp() || taken_[conv.id] || layout(conv.attrs) != layout(bn.attrs)) {
      continue;
    }
    const absl::StatusOr<runtime::ConvShape> shape =
        ops::Conv2dShape(conv.attrs, g_.spec(conv.inputs[0]), g_.spec(conv.inputs[1]));
    if (!shape.ok() || shape->dtype != bn.outputs[0].dtype ||
        !ops::ConvBatchNormStatsSupport(shape->layout, shape->dtype, shape->c, shape->k).ok()) {
      continue;
    }
    NodeGroup group{.members = {conv.id, bn.id},
                    .op = &ops::Conv2dBatchNormTrainOp(),
                    .name = absl::StrCat(conv.name, "+", bn.name),
                    .attrs = conv.attrs,
                    .inputs = {conv.inputs[0], conv.inputs[1], bn.inputs[1], bn.inputs[2],
                               bn.inputs[3], bn.inputs[4]},
                    .outputs = {Value{bn.id, 0}, Value{bn.id, 1}, Value{bn.id, 2}, x}};
    for (const char* key : {"epsilon", "momentum"}) {
      if (auto it = bn.attrs.find(key); it != bn.attrs.end()) group.attrs[key] = it->second;
    }
    const Node* next = SoleReader(Value{bn.id, 0});
    const Node* add = nullptr;
    Value residual;
    if (next != nullptr && next->op == &ops::AddOp()) {
      add = next;
      residual = add->inputs[0] == Value{bn.id, 0} ? add->inputs[1] : add->inputs[0];
      next = residual == Value{bn.id, 0} ? nullptr : SoleReader(Value{add->id, 0});
    }
    const bool relu = next != nullptr && next->op == &ops::ReluOp();
    group.attrs["relu"] = relu;
    group.attrs["residual"] = relu && add != nullptr;
    if (relu) {
      group.name = absl::StrCat(group.name, add ? "+add" : "", "+relu");
      group.members.push_back(next->id);
      group.outputs[0] = Value{next->id, 0};
      if (add) {
        group.members.push_back(add->id);
        group.inputs.push_back(residual);
      }
    }
    TryAdd(std::move(group));
  }
}

// Batch norms (either layout: both run on our kernels) whose output feeds a ReLU (directly or
// through a residual add) take the add and the ReLU into their last kernel; the ReLU's gradient
// joins the batch-norm gradient. In 16 bits the fused kernel rounds once where the unfused ops
// round after the batch norm and after the add.
void GroupFinder::BatchNormActivations(bool relu_bits, bool grad_sums, int64_t sums_min_elements) {
  auto fusable = [](const Node& n) {
    return n.outputs[0].dtype == DType::kFloat32 || IsLowPrecision(n.outputs[0].dtype);
  };
  for (const Node& bn : g_.nodes()) {
    if (bn.op != &ops::BatchNormTrainOp() || taken_[bn.id] || !fusable(bn)) continue;
    const Node* next = SoleReader(Value{bn.id, 0});
    if (next == nullptr) continue;
    const Node* add = nullptr;
    Value residual;
    if (next->op == &ops::AddOp()) {
      add = next;
      residual = add->inputs[0] == Value{bn.id, 0} ? add->inputs[1] : add->inputs[0];
      if (residual == Value{bn.id, 0}) continue;
      next = SoleReader(Value{add->id, 0});
      if (next == nullptr) continue;
    }
    if (next->op != &ops::ReluOp()) continue;
    NodeGroup group{.members = {bn.id, next->id},
                    .op = &ops::BatchNormActTrainOp(),
                    .name = absl::StrCat(bn.name, add ? "+add" : "", "+relu"),
                    .attrs = bn.attrs,
                    .inputs = bn.inputs,
                    .outputs = {Value{next->id, 0}, Value{bn.id, 1}, Value{bn.id, 2}}};
    group.attrs["residual"] = add != nullptr;
    if (add) {
      group.members.push_back(add->id);
      group.inputs.push_back(residual);
    }
    // The ReLU's keep bits, a value of the new graph only, for its gradient below.
    const bool bits = add != nullptr && relu_bits &&
                      ops::BatchNormKeepBitsSpec(bn.attrs, g_.spec(bn.inputs[0])).ok();
    if (bits) {
      group.attrs["keep_bits"] = true;
      group.outputs.push_back(NewValueKey(g_, new_values_));
    }
    if (TryAdd(std::move(group)) && bits) relu_bits_[next->id] = NewValueKey(g_, new_values_++);
  }
  for (const Node& grad : g_.nodes()) {
    if (grad.op != &ops::BatchNormGradOp() || taken_[grad.id] || !fusable(grad)) continue;
    const Node& relu_grad = g_.node(grad.inputs[0].node);
    if (relu_grad.op != &ops::ReluGradOp() || taken_[relu_grad.id] || ir::IsLeaf(relu_grad))
      continue;
    const absl::flat_hash_set<int32_t> members = {relu_grad.id, grad.id};
    const bool masked_output = NeededOutside(Value{relu_grad.id, 0}, members);
    // A ReLU right after this batch norm: its mask comes from x and beta, not from its output.
    const std::optional<Value> beta = BetaOfReluInput(relu_grad.inputs[1], grad);
    NodeGroup group{.members = {relu_grad.id, grad.id},
                    .op = &ops::BatchNormActGradOp(),
                    .name = absl::StrCat(relu_grad.name, "+", grad.name),
                    .attrs = grad.attrs,
                    .inputs = {relu_grad.inputs[0], beta.value_or(relu_grad.inputs[1]),
                               grad.inputs[1], grad.inputs[2], grad.inputs[3], grad.inputs[4]},
                    .outputs = {Value{grad.id, 0}, Value{grad.id, 1}, Value{grad.id, 2}}};
    group.attrs["masked_output"] = masked_output;
    group.attrs["relu_from_x"] = beta.has_value();
    if (masked_output) group.outputs.push_back(Value{relu_grad.id, 0});
    // A ReLU whose fused forward writes keep bits: the mask from them, not from its output.
    const Value act = relu_grad.inputs[1];
    if (auto it = relu_bits_.find(act.node);
        !beta.has_value() && act.output == 0 && it != relu_bits_.end()) {
      group.inputs[1] = it->second;
      group.attrs["relu_from_bits"] = true;
    }
    if (grad_sums && masked_output &&
        g_.spec(relu_grad.inputs[0]).shape.NumElements() >= sums_min_elements) {
      TakeGradientSum(relu_grad, group);
    }
    TryAdd(std::move(group));
  }
}

// The add that makes `relu_grad`'s dy, read by nothing else, as a member of `group` (a
// batch_norm_act_grad writing its masked gradient): its summands become dy and dy_addend.
void GroupFinder::TakeGradientSum(const Node& relu_grad, NodeGroup& group) const {
  const Node& add = g_.node(relu_grad.inputs[0].node);
  if (add.op != &ops::AddOp() || taken_[add.id] || relu_grad.inputs[0].output != 0 ||
      SoleReader(Value{add.id, 0}) != &relu_grad || g_.spec(add.inputs[0]) != add.outputs[0] ||
      g_.spec(add.inputs[1]) != add.outputs[0]) {
    return;
  }
  group.members.push_back(add.id);
  group.name = absl::StrCat(add.name, "+", group.name);
  group.inputs[0] = add.inputs[0];
  group.inputs.push_back(add.inputs[1]);
  group.attrs["dy_addend"] = true;
}

std::optional<Value> GroupFinder::BetaOfReluInput(Value act, const Node& grad) const {
  const Node& relu = g_.node(act.node);
  if (relu.op != &ops::ReluOp() || relu.inputs[0].output != 0) return std::nullopt;
  const Node& bn = g_.node(relu.inputs[0].node);
  const Value x = grad.inputs[1], gamma = grad.inputs[2], mean = grad.inputs[3],
              invstd = grad.inputs[4];
  if (bn.inputs[1] != gamma) return std::nullopt;
  if (bn.op == &ops::BatchNormTrainOp()) {
    if (bn.inputs[0] != x || Value{bn.id, 1} != mean || Value{bn.id, 2} != invstd) {
      return std::nullopt;
    }
  } else if (bn.op == &ops::BatchNormApplyOp()) {
    if (ir::BoolAttrOr(bn.attrs, "relu", false) || ir::BoolAttrOr(bn.attrs, "residual", false) ||
        bn.inputs[0] != x || bn.inputs[3] != mean || bn.inputs[4] != invstd) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  if (bn.outputs[0].dtype != relu.outputs[0].dtype) return std::nullopt;
  return bn.inputs[2];
}

bool GroupFinder::PlainApply(const Node& node) const {
  if (node.op != &ops::BatchNormApplyOp() || taken_[node.id] ||
      ir::BoolAttrOr(node.attrs, "relu", false) || ir::BoolAttrOr(node.attrs, "residual", false)) {
    return false;
  }
  const DType dtype = node.outputs[0].dtype;
  return dtype == DType::kFloat32 || IsLowPrecision(dtype);  // No float64 lowering.
}

const Node* GroupFinder::AddRelu(const Node& add) const {
  if (add.op != &ops::AddOp() || taken_[add.id]) return nullptr;
  const Node* relu = SoleReader(Value{add.id, 0});
  return relu != nullptr && relu->op == &ops::ReluOp() ? relu : nullptr;
}

// A residual stage's block outputs recomputed by the mirror pass, each from the one before:
//   s0 = apply(x0);  v1 = relu(apply(x1) + s0);  v2 = relu(apply(x2) + v1); ...
// as one batch_norm_apply_chain. s0 (a downsampling shortcut's batch norm) must be read by the
// first add alone; each v may be read elsewhere too (the weight gradients read them). The first
// block's two applies are ordered as BatchNormApplyActivations would fuse them (the first in node
// order takes the add), so the carried value is the one that path stores.
void GroupFinder::BatchNormApplyChains() {
  for (const Node& add : g_.nodes()) {
    const Node* relu = AddRelu(add);
    if (relu == nullptr || add.inputs[0].output != 0 || add.inputs[1].output != 0) continue;
    const Node& a = g_.node(add.inputs[0].node);
    const Node& b = g_.node(add.inputs[1].node);
    if (a.id == b.id || !PlainApply(a) || !PlainApply(b) || SoleReader(Value{a.id, 0}) != &add ||
        SoleReader(Value{b.id, 0}) != &add || !(a.outputs[0] == b.outputs[0])) {
      continue;
    }
    const Node& fused = a.id < b.id ? a : b;  // Takes the add in BatchNormApplyActivations.
    const Node& first = a.id < b.id ? b : a;
    NodeGroup group{.members = {first.id, fused.id, add.id, relu->id},
                    .op = &ops::BatchNormApplyChainOp(),
                    .name = absl::StrCat(fused.name, "+chain"),
                    .attrs = {},
                    .inputs = first.inputs,
                    .outputs = {Value{relu->id, 0}}};
    // Only the layout: the chain's other attributes are its steps' (no residual or ReLU first).
    if (auto layout = first.attrs.find("layout"); layout != first.attrs.end()) {
      group.attrs["layout"] = layout->second;
    }
    group.inputs.insert(group.inputs.end(), fused.inputs.begin(), fused.inputs.end());
    // Later blocks: an add of the last value and a plain apply read by that add alone.
    Value last{relu->id, 0};
    while (group.outputs.size() + 1 < static_cast<size_t>(codegen::kBatchNormChainMaxSteps)) {
      const Node* next_apply = nullptr;
      const Node* next_relu = nullptr;
      int32_t next_add = -1;
      for (int32_t reader : Readers(last)) {
        const Node& next = g_.node(reader);
        const Node* r = AddRelu(next);
        if (r == nullptr || next.inputs[0] == next.inputs[1]) continue;
        const Value other = next.inputs[0] == last ? next.inputs[1] : next.inputs[0];
        const Node& apply = g_.node(other.node);
        if (other.output != 0 || !PlainApply(apply) || SoleReader(other) != &next ||
            !(apply.outputs[0] == first.outputs[0])) {
          continue;
        }
        next_apply = &apply, next_relu = r, next_add = next.id;
        break;
      }
      if (next_apply == nullptr) break;
      group.members.insert(group.members.end(), {next_apply->id, next_add, next_relu->id});
      group.inputs.insert(group.inputs.end(), next_apply->inputs.begin(), next_apply->inputs.end());
      last = Value{next_relu->id, 0};
      group.outputs.push_back(last);
    }
    group.name = absl::StrCat(group.name, group.outputs.size() + 1);
    TryAdd(std::move(group));
  }
}

// A batch norm recomputed by the mirror pass (batch_norm_apply, either layout) takes the twins of
// the residual add and ReLU that follow it: one pass over memory for the whole recomputation.
void GroupFinder::BatchNormApplyActivations() {
  for (const Node& apply : g_.nodes()) {
    if (apply.op != &ops::BatchNormApplyOp() || taken_[apply.id] ||
        ir::BoolAttrOr(apply.attrs, "relu", false))
      continue;
    const DType dtype = apply.outputs[0].dtype;
    if (dtype != DType::kFloat32 && !IsLowPrecision(dtype)) continue;  // No float64 lowering.
    const Node* next = SoleReader(Value{apply.id, 0});
    if (next == nullptr) continue;
    const Node* add = nullptr;
    Value residual;
    if (next->op == &ops::AddOp()) {
      add = next;
      residual = add->inputs[0] == Value{apply.id, 0} ? add->inputs[1] : add->inputs[0];
      if (residual == Value{apply.id, 0}) continue;
      next = SoleReader(Value{add->id, 0});
      if (next == nullptr) continue;
    }
    if (next->op != &ops::ReluOp()) continue;
    NodeGroup group{.members = {apply.id, next->id},
                    .op = &ops::BatchNormApplyOp(),
                    .name = absl::StrCat(apply.name, add ? "+add" : "", "+relu"),
                    .attrs = apply.attrs,
                    .inputs = apply.inputs,
                    .outputs = {Value{next->id, 0}}};
    group.attrs["relu"] = true;
    group.attrs["residual"] = add != nullptr;
    if (add) {
      group.members.push_back(add->id);
      group.inputs.push_back(residual);
    }
    TryAdd(std::move(group));
  }
}

}  // namespace reprise::passes
