#include "src/passes/fuse.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/fused_kernels.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/batched.h"
#include "src/ops/cast.h"
#include "src/ops/conv.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/lr_schedule.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
#include "src/passes/fuse_batched.h"
#include "src/passes/fuse_mlp_step.h"
#include "src/passes/rewrite.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

bool Chainable(const Node& node) {
  return node.op->kind == ir::OpKind::kPointwise && !node.op->pointwise.expression.empty();
}

// Finds the groups, each node in at most one.
class GroupFinder {
 public:
  GroupFinder(const Graph& graph, absl::Span<const Value> kept)
      : g_(graph), consumers_(graph), kept_(kept.begin(), kept.end()), taken_(graph.num_nodes()) {}

  void LossWithGrad();
  void BatchNormActivations();
  void BatchNormApplyChains();
  void PoolingOfRecomputedActivations();
  void PoolingArgmaxInForward();
  void BatchNormApplyActivations();
  void GemmEpilogues(bool relu_backward);
  void ConvDgradAccumulations();
  void PointwiseChains();
  // sgd_momentum (folding widening gradient casts in, if asked) and adam.
  void MultiTensorUpdates(bool fold_gradient_casts);
  std::vector<NodeGroup> TakeGroups() { return std::move(groups_); }

 private:
  std::vector<int32_t> Readers(Value v) const {
    auto it = consumers_.readers.find(v);
    return it == consumers_.readers.end() ? std::vector<int32_t>{} : it->second;
  }
  // The one node reading `v`, if `v` has exactly one reader, is not kept and that reader is free.
  const Node* SoleReader(Value v) const {
    const std::vector<int32_t> readers = Readers(v);
    if (kept_.contains(v) || readers.size() != 1 || taken_[readers[0]]) return nullptr;
    return &g_.node(readers[0]);
  }
  bool NeededOutside(Value v, const absl::flat_hash_set<int32_t>& members) const {
    if (kept_.contains(v)) return true;
    for (int32_t r : Readers(v)) {
      if (!members.contains(r)) return true;
    }
    return false;
  }
  // All of `groups` or none of them (when one alone would leave a value unwritten that another
  // reads).
  bool TryAddAll(std::vector<NodeGroup> groups) {
    for (const NodeGroup& group : groups) {
      if (!Placeable(g_, consumers_,
                     absl::flat_hash_set<int32_t>(group.members.begin(), group.members.end()))) {
        return false;
      }
    }
    for (NodeGroup& group : groups) TryAdd(std::move(group));
    return true;
  }
  bool TryAdd(NodeGroup group) {
    const absl::flat_hash_set<int32_t> members(group.members.begin(), group.members.end());
    if (!Placeable(g_, consumers_, members)) return false;
    for (int32_t m : members) taken_[m] = true;
    groups_.push_back(std::move(group));
    return true;
  }
  // Groups every `single` node sharing inputs after the first `per_tensor` into a `multi` node.
  void MultiTensor(const ir::OpDef& single, const ir::OpDef& multi, int per_tensor,
                   absl::string_view name, bool fold_gradient_casts = false);
  // Groups every adam node sharing inputs other than the weight decay into one adam_multi, with
  // the lr_schedule and clip_coefficient that only it reads; the group in `updates`, `attrs` those
  // of its nodes. False if it could not be placed.
  bool AdamGroup(const std::vector<int32_t>& updates, const Attrs& attrs, bool fold_scalars,
                 int index);
  // Whether every value of `node` is read by `members` alone.
  bool OnlyReadBy(const Node& node, const absl::flat_hash_set<int32_t>& members) const;
  // Adds `forward` (matmul_bias with relu) with its backward as cuBLASLt epilogues, if it has the
  // pattern; false leaves both to the caller.
  bool ReluBackwardEpilogue(NodeGroup& forward, const Node& relu);
  // Whether `ancestor` is `node` or one of the nodes it depends on.
  bool DependsOn(int32_t node, int32_t ancestor) const;
  // The beta of the batch norm whose statistics `grad` (batch_norm_grad) reads, where `act` is a
  // ReLU applied right to that batch norm's output (batch_norm_train's, or the mirror pass's
  // batch_norm_apply of the same x and statistics): its mask can then come from x.
  std::optional<Value> BetaOfReluInput(Value act, const Node& grad) const;
  // A plain batch_norm_apply (no residual, no ReLU, a float type) that is not taken.
  bool PlainApply(const Node& node) const;
  // Whether `reader`, which reads `v` in the graph, does not once fused: it is in a group whose
  // inputs do not include `v` (a ReLU gradient whose mask now comes from x).
  bool ReadFusedAway(int32_t reader, Value v) const;
  // The relu that alone reads `add`'s output, where `add` is an add not taken; else null.
  const Node* AddRelu(const Node& add) const;
  // Grows a chain from `seed` by readers of its values; returns the members and the column_sum.
  void GrowChain(int32_t seed, absl::flat_hash_set<int32_t>& members, int32_t& column_sum) const;

  const Graph& g_;
  const Consumers consumers_;
  const absl::flat_hash_set<Value> kept_;
  std::vector<bool> taken_;
  std::vector<NodeGroup> groups_;
  int new_values_ = 0;  // NewValueKey()s handed out (ReLU masks, pooling argmaxes).
};

void GroupFinder::LossWithGrad() {
  for (const Node& loss : g_.nodes()) {
    if (loss.op != &ops::SoftmaxCrossEntropyOp() || taken_[loss.id]) continue;
    for (int32_t r : Readers(loss.inputs[0])) {
      const Node& grad = g_.node(r);
      if (grad.op != &ops::SoftmaxCrossEntropyGradOp() || taken_[r] ||
          grad.inputs[1] != loss.inputs[1])
        continue;
      TryAdd({.members = {loss.id, grad.id},
              .op = &ops::SoftmaxCrossEntropyWithGradOp(),
              .name = absl::StrCat(loss.name, "+grad"),
              .inputs = {loss.inputs[0], loss.inputs[1], grad.inputs[2]},
              .outputs = {Value{loss.id, 0}, Value{grad.id, 0}}});
      break;
    }
  }
}

// Batch norms (either layout: both run on our kernels) whose output feeds a ReLU (directly or
// through a residual add) take the add and the ReLU into their last kernel; the ReLU's gradient
// joins the batch-norm gradient. In 16 bits the fused kernel rounds once where the unfused ops
// round after the batch norm and after the add.
void GroupFinder::BatchNormActivations() {
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
    TryAdd(std::move(group));
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
    TryAdd(std::move(group));
  }
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

bool GroupFinder::ReadFusedAway(int32_t reader, Value v) const {
  if (!taken_[reader]) return false;
  for (const NodeGroup& group : groups_) {
    if (std::find(group.members.begin(), group.members.end(), reader) == group.members.end()) {
      continue;
    }
    return std::find(group.inputs.begin(), group.inputs.end(), v) == group.inputs.end();
  }
  return false;
}

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

bool GroupFinder::DependsOn(int32_t node, int32_t ancestor) const {
  std::vector<int32_t> stack = {node};
  absl::flat_hash_set<int32_t> seen = {node};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    if (n == ancestor) return true;
    for (const Value& v : g_.node(n).inputs) {
      if (seen.insert(v.node).second) stack.push_back(v.node);
    }
  }
  return false;
}

// A residual block's input gradient, add(conv2d_dgrad(dy, w), acc), as one cuDNN call that adds
// the data gradient to acc in place (conv2d_dgrad_accumulate): no separate add reading both and
// writing a third tensor. Only where acc is a transient value that nothing reads after the add
// (each of its other readers is something the data gradient depends on), as the memory plan
// requires of a value written over.
void GroupFinder::ConvDgradAccumulations() {
  for (const Node& add : g_.nodes()) {
    if (add.op != &ops::AddOp() || taken_[add.id]) continue;
    for (int side = 0; side < 2; ++side) {
      const Value d = add.inputs[side], acc = add.inputs[1 - side];
      const Node& dgrad = g_.node(d.node);
      if (dgrad.op != &ops::Conv2dDgradOp() || taken_[dgrad.id] || SoleReader(d) != &add) {
        continue;
      }
      if (ir::IsLeaf(g_.node(acc.node)) || kept_.contains(acc) ||
          kept_.contains(Value{add.id, 0}) || acc == d || g_.spec(acc) != g_.spec(d))
        continue;
      bool read_before = true;
      for (int32_t r : Readers(acc)) {
        if (r != add.id && !DependsOn(dgrad.id, r)) read_before = false;
      }
      if (!read_before) continue;
      if (TryAdd({.members = {dgrad.id, add.id},
                  .op = &ops::Conv2dDgradAccumulateOp(),
                  .name = absl::StrCat(dgrad.name, "+", add.name),
                  .attrs = dgrad.attrs,
                  .inputs = {dgrad.inputs[0], dgrad.inputs[1], acc},
                  .outputs = {Value{add.id, 0}}}))
        break;
    }
  }
}

Attrs TransposeAttrs(const Node& mm) {
  return {{"transpose_a", ir::BoolAttrOr(mm.attrs, "transpose_a", false)},
          {"transpose_b", ir::BoolAttrOr(mm.attrs, "transpose_b", false)}};
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

void GroupFinder::GrowChain(int32_t seed, absl::flat_hash_set<int32_t>& members,
                            int32_t& column_sum) const {
  const TensorSpec element = g_.node(seed).outputs[0];
  members = {seed};
  column_sum = -1;
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<int32_t> candidates;
    for (int32_t m : members) {
      for (int32_t r : Readers(Value{m, 0})) {
        if (!members.contains(r) && !taken_[r] && r != column_sum) candidates.push_back(r);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    for (int32_t c : candidates) {
      const Node& node = g_.node(c);
      const bool is_sum = node.op == &ops::ColumnSumOp() && column_sum < 0 &&
                          element.shape.rank() == 2 && members.contains(node.inputs[0].node);
      if (!is_sum && !(Chainable(node) && node.outputs[0] == element)) continue;
      absl::flat_hash_set<int32_t> trial = members;
      if (column_sum >= 0) trial.insert(column_sum);
      trial.insert(c);
      if (!Placeable(g_, consumers_, trial)) continue;
      if (is_sum) {
        column_sum = c;
      } else {
        members.insert(c);
      }
      grew = true;
      break;
    }
  }
}

void GroupFinder::PointwiseChains() {
  for (const Node& seed : g_.nodes()) {
    if (taken_[seed.id] || !Chainable(seed)) continue;
    absl::flat_hash_set<int32_t> member_set;
    int32_t column_sum = -1;
    GrowChain(seed.id, member_set, column_sum);
    if (member_set.size() == 1 && column_sum < 0) continue;
    std::vector<int32_t> steps(member_set.begin(), member_set.end());
    std::sort(steps.begin(), steps.end());
    absl::flat_hash_set<int32_t> all = member_set;
    if (column_sum >= 0) all.insert(column_sum);

    NodeGroup group{.op = &ops::FusedPointwiseOp()};
    ops::PointwiseProgram program;
    absl::flat_hash_map<int32_t, int> step_of;
    for (int32_t id : steps) {
      const Node& node = g_.node(id);
      ops::PointwiseProgram::Step step{.op = node.op};
      for (const Value& v : node.inputs) {
        if (member_set.contains(v.node)) {
          step.operands.push_back(ops::PointwiseProgram::StepOperand(step_of[v.node]));
          continue;
        }
        auto it = std::find(group.inputs.begin(), group.inputs.end(), v);
        step.operands.push_back(static_cast<int>(it - group.inputs.begin()));
        if (it == group.inputs.end()) group.inputs.push_back(v);
      }
      step_of[id] = static_cast<int>(program.steps.size());
      program.steps.push_back(std::move(step));
      if (NeededOutside(Value{id, 0}, all)) {
        program.outputs.push_back(step_of[id]);
        group.outputs.push_back(Value{id, 0});
      }
    }
    if (program.outputs.empty() && column_sum < 0) {  // Nobody reads it; it still runs.
      program.outputs.push_back(static_cast<int>(steps.size()) - 1);
      group.outputs.push_back(Value{steps.back(), 0});
    }
    std::vector<std::string> names;
    for (int32_t id : steps) names.push_back(g_.node(id).name);
    if (column_sum >= 0) {
      program.column_sum = step_of[g_.node(column_sum).inputs[0].node];
      group.outputs.push_back(Value{column_sum, 0});
      names.push_back(g_.node(column_sum).name);
    }
    group.members.assign(all.begin(), all.end());
    group.attrs = program.ToAttrs();
    group.name = names.size() <= 3 ? absl::StrJoin(names, "+")
                                   : absl::StrCat(names[0], "+", names.size() - 1, "_more");
    TryAdd(std::move(group));
  }
}

void GroupFinder::MultiTensorUpdates(bool fold_gradient_casts) {
  MultiTensor(ops::SgdMomentumOp(), ops::SgdMomentumMultiOp(), 3, "sgd_momentum.all",
              fold_gradient_casts);
  // adam's inputs: w, g, m, v, then lr, step, beta1, beta2, epsilon, weight_decay, [clip], [check].
  constexpr int kPerTensor = 4, kWeightDecay = kPerTensor + 5;
  // One group per data-parallel bucket (as MultiTensor's) and set of shared inputs but the weight
  // decay, which adam_multi takes per tensor: decayed and undecayed parameters share a launch.
  std::map<std::tuple<int32_t, std::vector<std::pair<int32_t, int32_t>>, Attrs>,
           std::vector<int32_t>>
      by_hyper;
  for (const Node& node : g_.nodes()) {
    if (node.op != &ops::AdamOp() || taken_[node.id]) continue;
    std::vector<std::pair<int32_t, int32_t>> shared;
    for (size_t i = kPerTensor; i < node.inputs.size(); ++i) {
      if (i != kWeightDecay) shared.emplace_back(node.inputs[i].node, node.inputs[i].output);
    }
    const Node& gradient = g_.node(node.inputs[1].node);
    const int32_t bucket = gradient.op->kind == ir::OpKind::kCommunication ? gradient.id : -1;
    by_hyper[{bucket, shared, node.attrs}].push_back(node.id);
  }
  int index = 0;
  for (const auto& [hyper, updates] : by_hyper) {
    // With the step's scalars if it can be placed so, else without them.
    if (AdamGroup(updates, std::get<2>(hyper), true, index) ||
        AdamGroup(updates, std::get<2>(hyper), false, index)) {
      ++index;
    }
  }
}

bool GroupFinder::OnlyReadBy(const Node& node, const absl::flat_hash_set<int32_t>& members) const {
  for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
    if (NeededOutside(Value{node.id, out}, members)) return false;
  }
  return true;
}

bool GroupFinder::AdamGroup(const std::vector<int32_t>& updates, const Attrs& attrs,
                            bool fold_scalars, int index) {
  constexpr int kPerTensor = 4, kShared = 6;  // lr, step, beta1, beta2, epsilon, weight_decay
  const Node& first = g_.node(updates[0]);
  absl::StatusOr<ops::OptionalShared> optional = ops::OptionalSharedInputs(
      attrs, kPerTensor, static_cast<int>(first.inputs.size()) - kPerTensor, kShared);
  if (!optional.ok()) return false;
  NodeGroup group{.members = updates,
                  .op = &ops::AdamMultiOp(),
                  .name = index == 0 ? std::string("adam.all") : absl::StrCat("adam.all", index),
                  .attrs = attrs};
  group.attrs["tensors"] = static_cast<int64_t>(updates.size());
  absl::flat_hash_set<int32_t> members(updates.begin(), updates.end());
  auto shared = [&](int i) { return first.inputs[kPerTensor + i]; };
  // The scheduled rate and the clip coefficient, where only these updates read them, come from
  // their inputs inside the update's launch.
  Value lr = shared(0);
  std::vector<Value> clip;
  if (optional->clip >= 0) clip.push_back(shared(optional->clip));
  const Node& schedule = g_.node(lr.node);
  if (fold_scalars && schedule.op == &ops::LrScheduleOp() && !taken_[schedule.id] &&
      schedule.inputs[1] == shared(1) && OnlyReadBy(schedule, members)) {
    group.members.push_back(schedule.id);
    lr = schedule.inputs[0];
    for (const char* name : ops::kLrScheduleAttrs) {
      if (auto it = schedule.attrs.find(name); it != schedule.attrs.end()) {
        group.attrs[name] = it->second;
      }
    }
  }
  if (!clip.empty()) {
    const Node& norm = g_.node(clip[0].node);
    if (fold_scalars && norm.op == &ops::ClipCoefficientOp() && !taken_[norm.id] &&
        clip[0].output == 1 && OnlyReadBy(norm, members)) {
      group.members.push_back(norm.id);
      clip = norm.inputs;  // The partial sums and max_norm.
      group.attrs["clip_norm"] = true;
    }
  }
  if (updates.size() < 2 && group.members.size() == updates.size()) return false;
  for (int32_t m : updates) {
    const Node& node = g_.node(m);
    group.inputs.insert(group.inputs.end(), node.inputs.begin(), node.inputs.begin() + kPerTensor);
    group.inputs.push_back(node.inputs[kPerTensor + 5]);
  }
  group.inputs.push_back(lr);
  for (int i = 1; i < 5; ++i) group.inputs.push_back(shared(i));  // step, betas, epsilon
  group.inputs.insert(group.inputs.end(), clip.begin(), clip.end());
  if (optional->check >= 0) group.inputs.push_back(shared(optional->check));
  return TryAdd(std::move(group));
}

void GroupFinder::MultiTensor(const ir::OpDef& single, const ir::OpDef& multi, int per_tensor,
                              absl::string_view name, bool fold_gradient_casts) {
  // With fold_gradient_casts, an update whose gradient is the widening cast of a 16-bit gradient
  // read by nothing else takes the cast in and reads the 16-bit gradient (the multi-tensor kernels
  // widen it exactly on load): one launch and one float32 gradient less per parameter.
  absl::flat_hash_map<int32_t, int32_t> cast_of;  // Update -> the cast it takes in.
  auto gradient_of = [&](const Node& update) {
    auto it = cast_of.find(update.id);
    return it == cast_of.end() ? update.inputs[1] : g_.node(it->second).inputs[0];
  };
  // One group per set of shared inputs (rate, momentum or betas, weight decay, clip coefficient),
  // attributes and gradient type, so parameters without weight decay get a group of their own;
  // and per data-parallel bucket, so each bucket's updates run when its own all-reduce ends.
  using Key = std::tuple<int32_t, DType, std::vector<std::pair<int32_t, int32_t>>, Attrs>;
  std::map<Key, std::vector<int32_t>> by_hyper;
  for (const Node& node : g_.nodes()) {
    if (node.op != &single || taken_[node.id]) continue;
    const Node& producer = g_.node(node.inputs[1].node);  // Every update's input 1.
    if (fold_gradient_casts && producer.op == &ops::CastOp() && !taken_[producer.id] &&
        IsLowPrecision(g_.spec(producer.inputs[0]).dtype) && SoleReader(node.inputs[1]) == &node) {
      cast_of[node.id] = producer.id;
    }
    std::vector<std::pair<int32_t, int32_t>> shared;
    for (size_t i = per_tensor; i < node.inputs.size(); ++i)
      shared.emplace_back(node.inputs[i].node, node.inputs[i].output);
    const Value gradient = gradient_of(node);
    const Node& made_by = g_.node(gradient.node);
    const int32_t bucket = made_by.op->kind == ir::OpKind::kCommunication ? made_by.id : -1;
    by_hyper[{bucket, g_.spec(gradient).dtype, shared, node.attrs}].push_back(node.id);
  }
  // Without data parallelism, a group is cut into launches of one table each, in the order the
  // backward pass makes their gradients: each can run (on the weight lane) as soon as its own
  // gradients are ready, beside the rest of the backward, rather than all waiting for the last.
  std::vector<std::pair<const Key*, std::vector<int32_t>>> chunks;
  for (auto& [hyper, members] : by_hyper) {
    if (std::get<0>(hyper) >= 0) {
      chunks.emplace_back(&hyper, members);
      continue;
    }
    std::vector<int32_t> ordered = members;
    std::stable_sort(ordered.begin(), ordered.end(), [&](int32_t a, int32_t b) {
      return gradient_of(g_.node(a)).node < gradient_of(g_.node(b)).node;  // Ids are made in order.
    });
    for (size_t first = 0; first < ordered.size(); first += codegen::kSgdTableSize) {
      const size_t last = std::min(ordered.size(), first + codegen::kSgdTableSize);
      chunks.emplace_back(&hyper,
                          std::vector<int32_t>(ordered.begin() + first, ordered.begin() + last));
    }
  }
  int index = 0;
  for (const auto& [hyper, members] : chunks) {
    // A lone update stays as it is (its cast too): one launch either way.
    if (members.size() < 2) continue;
    NodeGroup group{.members = members,
                    .op = &multi,
                    .name = index == 0 ? std::string(name) : absl::StrCat(name, index),
                    .attrs = std::get<3>(*hyper)};
    group.attrs["tensors"] = static_cast<int64_t>(members.size());
    for (int32_t m : members) {
      const Node& node = g_.node(m);
      group.inputs.insert(group.inputs.end(), node.inputs.begin(),
                          node.inputs.begin() + per_tensor);
      if (auto it = cast_of.find(m); it != cast_of.end()) {
        group.inputs[group.inputs.size() - per_tensor + 1] = gradient_of(node);
        group.members.push_back(it->second);
      }
    }
    const Node& first = g_.node(members[0]);
    group.inputs.insert(group.inputs.end(), first.inputs.begin() + per_tensor, first.inputs.end());
    if (TryAdd(std::move(group))) ++index;
  }
}

}  // namespace

absl::StatusOr<FusedTraining> Fuse(const autodiff::TrainingGraph& training,
                                   absl::Span<const Value> kept, const FuseOptions& options) {
  FusedTraining fused;
  Graph source = training.graph;  // The whole-step match adds its barrier state here.
  std::vector<NodeGroup> groups;
  if (options.whole_mlp_step) {
    // A sum of models' losses is an ensemble's step; anything else is tried as one MLP.
    const bool ensemble = training.graph.node(training.loss.node).op == &ops::ModelSumOp();
    std::optional<NodeGroup> whole =
        ensemble
            ? MatchBatchedMlpTrainStep(source, training, kept, options.mlp_step_target,
                                       options.whole_step_max_models, &fused.whole_step_declined)
            : MatchMlpTrainStep(source, training, kept, options.mlp_step_target,
                                &fused.whole_step_declined);
    if (whole.has_value()) groups.push_back(*std::move(whole));
  }
  if (groups.empty()) {
    GroupFinder finder(training.graph, kept);
    if (options.loss_with_grad) finder.LossWithGrad();
    if (options.batch_norm_activations) {
      finder.BatchNormActivations();
      finder.BatchNormApplyChains();
      finder.PoolingOfRecomputedActivations();
      finder.PoolingArgmaxInForward();
      finder.BatchNormApplyActivations();
    }
    if (options.gemm_epilogues) finder.GemmEpilogues(options.relu_backward_epilogues);
    if (options.conv_dgrad_accumulate) finder.ConvDgradAccumulations();
    if (options.pointwise_chains) finder.PointwiseChains();
    if (options.multi_tensor_optimizer) finder.MultiTensorUpdates(options.fold_gradient_casts);
    groups = finder.TakeGroups();
    AddBatchedGroups(training.graph, kept, options, groups);  // Ensembles' batched layers.
  }
  ASSIGN_OR_RETURN(RewrittenGraph rewritten, ReplaceGroups(source, groups, kept));

  autodiff::TrainingGraph& t = fused.training;
  t.graph = std::move(rewritten.graph);
  auto value = [&](Value v) -> absl::StatusOr<Value> {
    auto it = rewritten.values.find(v);
    if (it == rewritten.values.end()) return absl::InternalError("the loss was fused away");
    return it->second;
  };
  ASSIGN_OR_RETURN(t.loss, value(training.loss));
  for (int32_t p : training.parameters) {
    const int32_t id = rewritten.nodes.at(p);
    t.parameters.push_back(id);
    Value gradient = training.gradients.at(p);
    auto grad = rewritten.values.find(gradient);
    // A widening cast folded into the update: the gradient lives on in its 16-bit form.
    if (const Node& cast = training.graph.node(gradient.node);
        grad == rewritten.values.end() && cast.op == &ops::CastOp()) {
      grad = rewritten.values.find(cast.inputs[0]);
    }
    if (grad != rewritten.values.end()) t.gradients[id] = grad->second;
  }
  absl::flat_hash_set<int32_t> optimizers;
  for (int32_t o : training.optimizer_nodes) {
    if (optimizers.insert(rewritten.nodes.at(o)).second)
      t.optimizer_nodes.push_back(rewritten.nodes.at(o));
  }
  fused.values = std::move(rewritten.values);
  for (const NodeGroup& group : groups) {
    std::vector<int32_t> members = group.members;
    std::sort(members.begin(), members.end());
    std::vector<std::string> names;
    for (int32_t m : members) names.push_back(training.graph.node(m).name);
    fused.groups.emplace_back(group.name, std::move(names));
  }
  return fused;
}

}  // namespace reprise::passes
