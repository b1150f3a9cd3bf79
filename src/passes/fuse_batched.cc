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

  // relu_grad -> batched_column_sum (a hidden layer's bias gradient): one pass over dy.
  void ReluGradBiasGrad() {
    for (const Node& sum : g_.nodes()) {
      if (sum.op != &ops::BatchedColumnSumOp() || taken_.contains(sum.id)) continue;
      const Node& grad = g_.node(sum.inputs[0].node);
      if (grad.op != &ops::ReluGradOp() || taken_.contains(grad.id) ||
          grad.outputs[0].shape.rank() != 3) {
        continue;
      }
      TryAdd({.members = {grad.id, sum.id},
              .op = &ops::BatchedReluGradBiasGradOp(),
              .name = absl::StrCat(grad.name, "+", sum.name),
              .inputs = grad.inputs,
              .outputs = {Value{grad.id, 0}, Value{sum.id, 0}}});
    }
  }

  // The ensemble's loss: batched_softmax_cross_entropy -> model_sum (the total), and in the
  // backward model_broadcast(dtotal) -> batched_softmax_cross_entropy_grad.
  void LossStep() {
    for (const Node& loss : g_.nodes()) {
      if (loss.op != &ops::BatchedSoftmaxCrossEntropyOp() || taken_.contains(loss.id)) continue;
      const std::vector<int32_t> sums = Readers(Value{loss.id, 0});
      if (sums.size() != 1 || g_.node(sums[0]).op != &ops::ModelSumOp() ||
          taken_.contains(sums[0])) {
        continue;
      }
      for (int32_t r : Readers(loss.inputs[0])) {
        const Node& grad = g_.node(r);
        if (grad.op != &ops::BatchedSoftmaxCrossEntropyGradOp() || taken_.contains(r) ||
            grad.inputs[1] != loss.inputs[1]) {
          continue;
        }
        const Node& broadcast = g_.node(grad.inputs[2].node);
        if (broadcast.op != &ops::ModelBroadcastOp() || SoleReader(grad.inputs[2]) != &grad) {
          continue;
        }
        TryAdd({.members = {loss.id, sums[0], broadcast.id, grad.id},
                .op = &ops::BatchedSoftmaxCrossEntropyWithGradOp(),
                .name = absl::StrCat(loss.name, "+sum+grad"),
                .inputs = {loss.inputs[0], loss.inputs[1], broadcast.inputs[0]},
                .outputs = {Value{loss.id, 0}, Value{sums[0], 0}, Value{grad.id, 0}}});
        break;
      }
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
  if (options.loss_with_grad) finder.LossStep();
  if (options.gemm_epilogues) finder.LayerEpilogues();
  if (options.pointwise_chains) finder.ReluGradBiasGrad();
}

}  // namespace reprise::passes
