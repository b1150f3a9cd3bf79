#include "src/passes/fuse_batched.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ops/batched.h"
#include "src/ops/ops.h"

namespace reprise::passes {
namespace {

class BatchedFinder {
 public:
  BatchedFinder(const Graph& graph, absl::Span<const Value> kept, std::vector<NodeGroup>& groups)
      : g_(graph), consumers_(graph), kept_(kept.begin(), kept.end()), groups_(groups) {
    for (const NodeGroup& group : groups) taken_.insert(group.members.begin(), group.members.end());
  }

  void LayerEpilogues() {
    for (const Node& mm : g_.nodes()) {
      if (mm.op != &ops::BatchedMatmulOp() || taken_.contains(mm.id)) continue;
      const Node* bias = SoleReader(Value{mm.id, 0});
      if (bias == nullptr || bias->op != &ops::BatchedBiasAddOp() ||
          bias->inputs[0] != Value{mm.id, 0}) {
        continue;
      }
      const Node* relu = SoleReader(Value{bias->id, 0});
      if (relu != nullptr && relu->op != &ops::ReluOp()) relu = nullptr;
      const Node& last = relu ? *relu : *bias;
      NodeGroup group{.members = {mm.id, bias->id},
                      .op = &ops::BatchedMatmulBiasOp(),
                      .name = absl::StrCat(mm.name, "+bias", relu ? "+relu" : ""),
                      .attrs = {{"transpose_a", ir::BoolAttrOr(mm.attrs, "transpose_a", false)},
                                {"transpose_b", ir::BoolAttrOr(mm.attrs, "transpose_b", false)},
                                {"relu", relu != nullptr}},
                      .inputs = {mm.inputs[0], mm.inputs[1], bias->inputs[1]},
                      .outputs = {Value{last.id, 0}}};
      if (relu) group.members.push_back(relu->id);
      TryAdd(std::move(group));
    }
  }

 private:
  std::vector<int32_t> Readers(Value v) const {
    auto it = consumers_.readers.find(v);
    return it == consumers_.readers.end() ? std::vector<int32_t>{} : it->second;
  }
  const Node* SoleReader(Value v) const {
    const std::vector<int32_t> readers = Readers(v);
    if (kept_.contains(v) || readers.size() != 1 || taken_.contains(readers[0])) return nullptr;
    return &g_.node(readers[0]);
  }
  void TryAdd(NodeGroup group) {
    const absl::flat_hash_set<int32_t> members(group.members.begin(), group.members.end());
    if (!Placeable(g_, consumers_, members)) return;
    taken_.insert(members.begin(), members.end());
    groups_.push_back(std::move(group));
  }

  const Graph& g_;
  const Consumers consumers_;
  const absl::flat_hash_set<Value> kept_;
  std::vector<NodeGroup>& groups_;
  absl::flat_hash_set<int32_t> taken_;
};

}  // namespace

void AddBatchedGroups(const Graph& graph, absl::Span<const Value> kept, const FuseOptions& options,
                      std::vector<NodeGroup>& groups) {
  BatchedFinder finder(graph, kept, groups);
  if (options.gemm_epilogues) finder.LayerEpilogues();
}

}  // namespace reprise::passes
