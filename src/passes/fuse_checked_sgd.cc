#include "src/passes/fuse_checked_sgd.h"

#include <algorithm>
#include <cstdint>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ops/ops.h"

namespace reprise::passes {
namespace {

constexpr int kPerTensor = ops::kSgdMultiInputsPerTensor;

// The group's fused form, its barrier words still to be added; or false where the rule declines.
bool CheckedGroup(const Graph& graph, const Consumers& consumers, const NodeGroup& group,
                  const absl::flat_hash_set<int32_t>& taken, NodeGroup& out) {
  const absl::StatusOr<int64_t> tensors = ir::IntAttr(group.attrs, "tensors");
  if (group.op != &ops::SgdMultiOp() || !ir::BoolAttrOr(group.attrs, "loss_scaled", false) ||
      group.attrs.contains("copies") || !tensors.ok() ||
      *tensors > codegen::kMaxMultiTensorCapacity ||
      static_cast<int64_t>(group.inputs.size()) != kPerTensor * *tensors + 3) {
    return false;  // Not the guard's update, or clipped (lr, momentum, clip, check).
  }
  const Node& check = graph.node(group.inputs.back().node);
  if (check.op != &ops::LossScaleCheckOp() || !ir::BoolAttrOr(check.attrs, "count", false) ||
      check.inputs.size() != 3 || taken.contains(check.id)) {
    return false;
  }
  const Node& flags = graph.node(check.inputs[0].node);
  auto readers = consumers.readers.find(Value{flags.id, 0});
  if (flags.op != &ops::GradNonfiniteOp() || taken.contains(flags.id) ||
      readers == consumers.readers.end() || readers->second != std::vector<int32_t>{check.id}) {
    return false;
  }
  // Every updated gradient is checked; whatever else is checked must be one small tensor.
  absl::flat_hash_set<Value> gradients;
  for (int64_t t = 0; t < *tensors; ++t) gradients.insert(group.inputs[kPerTensor * t + 1]);
  std::vector<Value> extras;
  int64_t found = 0;
  for (const Value& v : flags.inputs) {
    if (gradients.contains(v)) {
      ++found;
    } else {
      extras.push_back(v);
    }
  }
  if (found != static_cast<int64_t>(gradients.size()) || extras.size() > 1 ||
      (!extras.empty() && graph.spec(extras[0]).shape.NumElements() > codegen::kNormChunk)) {
    return false;
  }
  out = group;
  out.name = absl::StrCat(group.name, "+", check.name);
  out.members.push_back(flags.id);
  out.members.push_back(check.id);
  out.attrs.erase("loss_scaled");
  out.attrs["checks"] = static_cast<int64_t>(extras.size());
  if (ir::BoolAttrOr(check.attrs, "sticky", false)) out.attrs["sticky"] = true;
  out.inputs.pop_back();
  out.inputs.insert(out.inputs.end(), extras.begin(), extras.end());
  out.inputs.push_back(check.inputs[1]);  // skipped_steps
  out.inputs.push_back(check.inputs[2]);  // record
  out.outputs = {Value{check.id, 0}};
  return GroupPlaceable(graph, consumers, out);
}

}  // namespace

void FoldGuardIntoSgdLaunch(Graph& source, const Graph& graph, std::vector<NodeGroup>& groups) {
  absl::flat_hash_set<int32_t> taken;
  for (const NodeGroup& group : groups) taken.insert(group.members.begin(), group.members.end());
  const Consumers consumers(graph);
  for (NodeGroup& group : groups) {
    NodeGroup checked;
    if (!CheckedGroup(graph, consumers, group, taken, checked)) continue;
    // The groups name the values they create after source's nodes (NewValueKey): one node more
    // moves those names on by one.
    const int32_t first_new = source.num_nodes();
    const absl::StatusOr<Value> words =
        source.AddState(absl::StrCat(checked.name, ".barrier"),
                        {Shape{codegen::kSgdCheckWords}, DType::kInt32}, Initializer::Zeros());
    if (!words.ok()) return;  // The name is taken: leave the group as it was.
    group = std::move(checked);
    for (NodeGroup& g : groups) {
      for (std::vector<Value>* values : {&g.inputs, &g.outputs}) {
        for (Value& v : *values) {
          if (v.node >= first_new) v.node += source.num_nodes() - first_new;
        }
      }
    }
    group.inputs.push_back(*words);
    return;  // One update reads the guard's check.
  }
}

}  // namespace reprise::passes
