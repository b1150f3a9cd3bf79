// Fusion rule of mixed precision's weight copies: the float32 parameters' casts to a 16-bit type
// in one multi-tensor launch (cast_multi) instead of a launch each; or, asked for, in several that
// follow the order in which the forward pass first reads the copies and run on the weight lane,
// so that lane 0 waits only for the first one while lane 1 makes the rest beside the forward.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ops/cast.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/schedule.h"

namespace reprise::passes {

void GroupFinder::ParameterCasts(int64_t group_elements) {
  struct Copy {
    int32_t first_use;  // Where its first reader is placed once fused.
    int32_t cast;
  };
  std::map<DType, std::vector<Copy>> by_type;
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
    int32_t first_use = g_.num_nodes();
    for (int32_t reader : Readers(Value{node.id, 0})) {
      // An embedding that now gathers from the float32 parameter reads the copy no more.
      if (!ReadFusedAway(reader, Value{node.id, 0})) {
        first_use = std::min(first_use, PlacedAt(reader));
      }
    }
    by_type[to].push_back({first_use, node.id});
  }
  for (auto& [to, copies] : by_type) {
    if (copies.size() < 2) continue;  // One launch either way.
    std::stable_sort(copies.begin(), copies.end(),
                     [](const Copy& a, const Copy& b) { return a.first_use < b.first_use; });
    std::vector<std::vector<int32_t>> launches(1);
    int64_t elements = 0;
    for (const Copy& copy : copies) {
      if (group_elements > 0 && elements >= group_elements) {
        launches.emplace_back();
        elements = 0;
      }
      launches.back().push_back(copy.cast);
      elements += g_.spec(Value{copy.cast, 0}).NumElements();
    }
    for (size_t i = 0; i < launches.size(); ++i) {
      NodeGroup group{.members = launches[i],
                      .op = &ops::CastMultiOp(),
                      .name = launches.size() == 1
                                  ? absl::StrCat("parameters.to_", DTypeName(to))
                                  : absl::StrCat("parameters.to_", DTypeName(to), ".", i),
                      .attrs = {{"dtype", ops::DTypeAttr(to)}},
                      .at_first_member = true};
      // Made in turns, the copies run on the weight lane ahead of their readers.
      if (group_elements > 0) group.attrs["role"] = std::string(kWeightCopyRole);
      for (int32_t c : launches[i]) {
        group.inputs.push_back(g_.node(c).inputs[0]);
        group.outputs.push_back(Value{c, 0});
      }
      TryAdd(std::move(group));
    }
  }
}

}  // namespace reprise::passes
