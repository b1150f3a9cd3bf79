// Fusion rules into our generated kernels: the loss with its gradient, and chains of pointwise
// ops (with a bias gradient's column sum).
#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/ops.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

void GroupFinder::LossWithGrad() {
  for (const Node& loss : g_.nodes()) {
    if (loss.op != &ops::SoftmaxCrossEntropyOp() || taken_[loss.id]) continue;
    for (int32_t r : Readers(loss.inputs[0])) {
      const Node& grad = g_.node(r);
      // The same labels and the same real classes (the "classes" attribute).
      if (grad.op != &ops::SoftmaxCrossEntropyGradOp() || taken_[r] ||
          grad.inputs[1] != loss.inputs[1] || grad.attrs != loss.attrs)
        continue;
      TryAdd({.members = {loss.id, grad.id},
              .op = &ops::SoftmaxCrossEntropyWithGradOp(),
              .name = absl::StrCat(loss.name, "+grad"),
              .attrs = loss.attrs,
              .inputs = {loss.inputs[0], loss.inputs[1], grad.inputs[2]},
              .outputs = {Value{loss.id, 0}, Value{grad.id, 0}}});
      break;
    }
  }
}

void GroupFinder::HeadLossChunks(int chunks, int64_t auto_min_elements) {
  for (const Node& loss : g_.nodes()) {
    if (loss.op != &ops::SoftmaxCrossEntropyOp() || taken_[loss.id]) continue;
    const Value z = loss.inputs[0];
    const Node& product = g_.node(z.node);
    if (product.op != &ops::MatmulOp() || taken_[product.id] ||
        product.outputs[0].shape.rank() != 2 ||
        ir::BoolAttrOr(product.attrs, "transpose_a", false) ||
        !ir::BoolAttrOr(product.attrs, "transpose_b", false)) {
      continue;
    }
    // Chosen (chunks < 0): two slices for logits large enough that the loss pass beside the
    // products pays (measured on GPT-2 124M, KernelTuning::head_loss_chunks).
    const int slices = chunks >= 0
                           ? chunks
                           : (product.outputs[0].shape.NumElements() >= auto_min_elements ? 2 : 0);
    if (slices < 2 || product.outputs[0].shape.dim(0) < slices) continue;
    const Node* grad = nullptr;
    for (int32_t r : Readers(z)) {
      const Node& reader = g_.node(r);
      if (reader.op == &ops::SoftmaxCrossEntropyGradOp() && !taken_[r] &&
          reader.inputs[1] == loss.inputs[1] && reader.attrs == loss.attrs) {
        grad = &reader;
      }
    }
    if (grad == nullptr) continue;
    // The data gradient dz·w of the same w, no transposes.
    const Node* dgrad = nullptr;
    for (int32_t r : Readers(Value{grad->id, 0})) {
      const Node& reader = g_.node(r);
      if (reader.op == &ops::MatmulOp() && !taken_[r] && reader.inputs[0] == Value{grad->id, 0} &&
          reader.inputs[1] == product.inputs[1] &&
          !ir::BoolAttrOr(reader.attrs, "transpose_a", false) &&
          !ir::BoolAttrOr(reader.attrs, "transpose_b", false)) {
        dgrad = &reader;
      }
    }
    if (dgrad == nullptr) continue;
    // The logits are written over by their gradient: nothing else may read them.
    if (NeededOutside(z, {loss.id, grad->id})) continue;
    Attrs attrs = loss.attrs;
    attrs[ops::kHeadLossChunksAttr] = int64_t{slices};
    TryAdd({.members = {product.id, loss.id, grad->id, dgrad->id},
            .op = &ops::HeadLossChunksOp(),
            .name = absl::StrCat(product.name, "+", loss.name, "+grad+dgrad"),
            .attrs = std::move(attrs),
            .inputs = {product.inputs[0], product.inputs[1], loss.inputs[1], grad->inputs[2]},
            .outputs = {Value{loss.id, 0}, Value{grad->id, 0}, Value{dgrad->id, 0}}});
  }
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

}  // namespace reprise::passes
