// Fusion rule of mixed precision's weight copies: every float32 parameter's cast to a 16-bit type
// in one multi-tensor launch (cast_multi) where the first of them ran, instead of a launch each.
#include <map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ops/cast.h"
#include "src/passes/fuse_rules.h"

namespace reprise::passes {

void GroupFinder::ParameterCasts() {
  std::map<DType, std::vector<int32_t>> by_type;  // The casts to each type, in graph order.
  absl::flat_hash_set<std::pair<int32_t, DType>> seen;
  for (const Node& node : g_.nodes()) {
    if (node.op != &ops::CastOp() || taken_[node.id] || !node.control_inputs.empty()) continue;
    const Node& source = g_.node(node.inputs[0].node);
    const DType to = node.outputs[0].dtype;
    if (source.op != &ir::ParameterOp() || g_.spec(node.inputs[0]).dtype != DType::kFloat32 ||
        !IsLowPrecision(to)) {
      continue;
    }
    // The first cast of each parameter only: a second one is a recomputation the mirror pass put
    // in the backward to shorten the copy's life, which an early launch would undo.
    if (!seen.insert({source.id, to}).second) continue;
    by_type[to].push_back(node.id);
  }
  for (const auto& [to, casts] : by_type) {
    if (casts.size() < 2) continue;  // One launch either way.
    NodeGroup group{.members = casts,
                    .op = &ops::CastMultiOp(),
                    .name = absl::StrCat("parameters.to_", DTypeName(to)),
                    .attrs = {{"dtype", ops::DTypeAttr(to)}},
                    .at_first_member = true};
    for (int32_t c : casts) {
      group.inputs.push_back(g_.node(c).inputs[0]);
      group.outputs.push_back(Value{c, 0});
    }
    TryAdd(std::move(group));
  }
}

}  // namespace reprise::passes
