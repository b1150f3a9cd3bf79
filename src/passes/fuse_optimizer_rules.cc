// Fusion rules of the optimizer: every update sharing hyperparameters in one multi-tensor
// launch per table of tensors.
#include <algorithm>
#include <map>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/codegen/fused_kernels.h"
#include "src/ops/batch_norm.h"
#include "src/ops/cast.h"
#include "src/ops/lr_schedule.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

void GroupFinder::MultiTensorUpdates(bool fold_gradient_casts, bool sgd_one_launch) {
  if (sgd_one_launch) SgdOneLaunch(fold_gradient_casts);
  MultiTensor(ops::SgdMomentumOp(), ops::SgdMomentumMultiOp(), 3, "sgd_momentum.all",
              fold_gradient_casts);
  // adam's inputs: w, g, m, v, then lr, step, beta1, beta2, epsilon, weight_decay, [clip], [check].
  // Decayed and undecayed parameters share a launch: adam_multi takes the decay per tensor.
  int index = 0;
  for (const auto& [hyper, updates] :
       ByHyperparameters(ops::AdamOp(), 4, 4 + 5, [](const Node&) { return true; })) {
    // With the step's scalars and the gradients' casts if it can be placed so, else without them.
    const Attrs& attrs = std::get<2>(hyper);
    if (AdamGroup(updates, attrs, true, fold_gradient_casts, index) ||
        AdamGroup(updates, attrs, false, fold_gradient_casts, index) ||
        (fold_gradient_casts && (AdamGroup(updates, attrs, true, false, index) ||
                                 AdamGroup(updates, attrs, false, false, index)))) {
      ++index;
    }
  }
}

GroupFinder::ByHyper GroupFinder::ByHyperparameters(
    const ir::OpDef& op, int per_tensor, int weight_decay,
    absl::FunctionRef<bool(const Node&)> wanted) const {
  ByHyper by_hyper;
  for (const Node& node : g_.nodes()) {
    if (node.op != &op || taken_[node.id] || !wanted(node)) continue;
    std::vector<std::pair<int32_t, int32_t>> shared;
    for (size_t i = per_tensor; i < node.inputs.size(); ++i) {
      if (static_cast<int>(i) != weight_decay) {
        shared.emplace_back(node.inputs[i].node, node.inputs[i].output);
      }
    }
    const Node& gradient = g_.node(node.inputs[1].node);
    const int32_t bucket = gradient.op->kind == ir::OpKind::kCommunication ? gradient.id : -1;
    by_hyper[{bucket, shared, node.attrs}].push_back(node.id);
  }
  return by_hyper;
}

void GroupFinder::SgdOneLaunch(bool fold_gradient_casts) {
  constexpr int kPerTensor = 3;  // w, g, v, then lr, momentum, weight_decay[, clip][, check]
  // Only updates that wait for every gradient anyway (a clip coefficient or the check of loss
  // scaling or of the non-finite guard): others keep sgd_momentum_multi's launches in the order
  // the gradients come, which may run beside the rest of the backward pass.
  auto waits_for_all = [](const Node& node) {
    const absl::StatusOr<ops::OptionalShared> optional = ops::OptionalSharedInputs(
        node.attrs, kPerTensor, static_cast<int>(node.inputs.size()) - kPerTensor, 3);
    return optional.ok() && (optional->clip >= 0 || optional->check >= 0);
  };
  // Gradients of every type and every weight decay share the launch.
  int index = 0;
  for (const auto& [hyper, updates] :
       ByHyperparameters(ops::SgdMomentumOp(), kPerTensor, kPerTensor + 2, waits_for_all)) {
    const Attrs& attrs = std::get<2>(hyper);
    if (SgdGroup(updates, attrs, fold_gradient_casts, index) ||
        (fold_gradient_casts && SgdGroup(updates, attrs, false, index))) {
      ++index;
    }
  }
}

bool GroupFinder::SgdGroup(const std::vector<int32_t>& updates, const Attrs& attrs, bool fold_casts,
                           int index) {
  constexpr int kPerTensor = 3, kWeightDecay = kPerTensor + 2;
  const Node& first = g_.node(updates[0]);
  NodeGroup group{.members = updates,
                  .op = &ops::SgdMultiOp(),
                  .name = index == 0 ? std::string("sgd.all") : absl::StrCat("sgd.all", index),
                  .attrs = attrs};
  group.attrs["tensors"] = static_cast<int64_t>(updates.size());
  AddPerTensorInputs(group, updates, kPerTensor, kWeightDecay, fold_casts);
  if (updates.size() < 2 && group.members.size() == updates.size()) return false;
  // lr, momentum, then the clip coefficient and the check, as sgd_momentum has them.
  for (size_t i = kPerTensor; i < first.inputs.size(); ++i) {
    if (static_cast<int>(i) != kWeightDecay) group.inputs.push_back(first.inputs[i]);
  }
  return TryAdd(std::move(group));
}

void GroupFinder::AddPerTensorInputs(NodeGroup& group, const std::vector<int32_t>& updates,
                                     int per_tensor, int weight_decay, bool fold_casts) const {
  for (int32_t m : updates) {
    const Node& node = g_.node(m);
    group.inputs.insert(group.inputs.end(), node.inputs.begin(), node.inputs.begin() + per_tensor);
    // A 16-bit gradient's widening cast: the update reads the 16-bit gradient, widening it exactly.
    if (const Node* cast = fold_casts ? FoldableGradientCast(node, 1) : nullptr; cast != nullptr) {
      group.inputs[group.inputs.size() - per_tensor + 1] = cast->inputs[0];
      group.members.push_back(cast->id);
    }
    group.inputs.push_back(node.inputs[weight_decay]);
  }
}

const Node* GroupFinder::FoldableGradientCast(const Node& update, int input) const {
  const Value gradient = update.inputs[input];
  const Node& producer = g_.node(gradient.node);
  if (producer.op != &ops::CastOp() || taken_[producer.id] ||
      !IsLowPrecision(g_.spec(producer.inputs[0]).dtype) ||
      g_.spec(gradient).dtype != DType::kFloat32 || SoleReader(gradient) != &update) {
    return nullptr;
  }
  return &producer;
}

bool GroupFinder::AdamGroup(const std::vector<int32_t>& updates, const Attrs& attrs,
                            bool fold_scalars, bool fold_casts, int index) {
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
  AddPerTensorInputs(group, updates, kPerTensor, kPerTensor + 5, fold_casts);
  if (updates.size() < 2 && group.members.size() == updates.size()) return false;
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
    const Node* cast = fold_gradient_casts ? FoldableGradientCast(node, 1) : nullptr;
    if (cast != nullptr) cast_of[node.id] = cast->id;  // Every update's input 1.
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

// grad_nonfinite over (g0, ..., loss) and grad_sum_squares over (g0, ...) without loss scaling,
// the same gradients in the same order, as one grad_sum_squares_nonfinite: one pass over the
// gradients instead of two. The guard's flags and the norm's partial sums keep their values.
void GroupFinder::NonfiniteChecksWithTheNorm() {
  for (const Node& check : g_.nodes()) {
    if (check.op != &ops::GradNonfiniteOp() || taken_[check.id] || check.inputs.size() < 2)
      continue;
    const absl::Span<const Value> gradients(check.inputs.data(), check.inputs.size() - 1);
    for (const Node& norm : g_.nodes()) {
      if (norm.op != &ops::GradSumSquaresOp() || taken_[norm.id] ||
          ir::BoolAttrOr(norm.attrs, "loss_scaled", false) ||
          !absl::c_equal(norm.inputs, gradients))
        continue;
      TryAdd({.members = {check.id, norm.id},
              .op = &ops::GradSumSquaresNonfiniteOp(),
              .name = absl::StrCat(norm.name, "+", check.name),
              .inputs = check.inputs,
              .outputs = {Value{norm.id, 0}, Value{check.id, 0}}});
      break;
    }
  }
}

}  // namespace reprise::passes
