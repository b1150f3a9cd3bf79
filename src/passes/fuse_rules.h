// The fuse pass's rules (src/passes/fuse.h): a GroupFinder walks the training graph once per rule
// family and collects groups of nodes to replace by one fused node, each node in at most one
// group. Each family lives in its own file (fuse_*_rules.cc); fuse.cc runs them in the order of
// FusionRules(), earlier rules taking their nodes first.
#ifndef REPRISE_SRC_PASSES_FUSE_RULES_H_
#define REPRISE_SRC_PASSES_FUSE_RULES_H_

#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "src/ir/op_def.h"
#include "src/passes/fuse.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

inline bool Chainable(const Node& node) {
  return node.op->kind == ir::OpKind::kPointwise && !node.op->pointwise.expression.empty();
}

// A product's orientation, for the fused node that replaces matmul node `mm`.
inline Attrs TransposeAttrs(const Node& mm) {
  return {{"transpose_a", ir::BoolAttrOr(mm.attrs, "transpose_a", false)},
          {"transpose_b", ir::BoolAttrOr(mm.attrs, "transpose_b", false)}};
}

// Finds the groups, each node in at most one. Each rule is a public member; the helpers they
// share are private.
class GroupFinder {
 public:
  GroupFinder(const Graph& graph, absl::Span<const Value> kept)
      : g_(graph), consumers_(graph), kept_(kept.begin(), kept.end()), taken_(graph.num_nodes()) {}

  void LossWithGrad();
  // z = x·wᵀ read only by a softmax_cross_entropy and its gradient, and the data gradient dz·w,
  // as one head_loss_chunks of `chunks` row slices; chunks < 0: two where z holds at least
  // auto_min_elements, none below (fuse_kernel_rules.cc).
  void HeadLossChunks(int chunks, int64_t auto_min_elements);
  void ConvBatchNormStats();
  // With `relu_bits`, residual ReLUs keep 1-bit masks for their gradients
  // (FuseOptions::batch_norm_relu_bits); with `grad_sums`, a gradient whose dy is an add of at
  // least `sums_min_elements` elements takes the add in (FuseOptions::batch_norm_grad_sums).
  void BatchNormActivations(bool relu_bits, bool grad_sums, int64_t sums_min_elements);
  void BatchNormApplyChains();
  void PoolingOfRecomputedActivations();
  void PoolingArgmaxInForward();
  void BatchNormApplyActivations();
  void GemmEpilogues(bool relu_backward);
  // A GELU layer's forward (and with `backward` its backward) in cuBLASLt's GELU_AUX_BIAS and
  // DGELU epilogues (fuse_gelu_rules.cc).
  void GeluEpilogues(bool backward);
  // matmul -> bias_add -> add(·, residual) as one product reading the residual (beta = 1).
  void ResidualEpilogues();
  // A weight gradient dYᵀ·X and the column_sum of the same dY (its layer's bias gradient) as one
  // product with cuBLASLt's BGRADB epilogue (matmul_bgrad, fuse_gelu_rules.cc).
  void WeightGradientBiasSums();
  // layer_norm_grad whose dx is added to another gradient: the add in the same kernel, and with
  // `bias_sums` a column sum of the result too (fuse_layer_norm_rules.cc).
  void LayerNormResidualGradients(bool bias_sums);
  // layer_norm_grad and a column sum of its dx as one layer_norm_grad_column_sum.
  void LayerNormGradientColumnSums();
  // add -> layer_norm as one add_layer_norm (the adds no product epilogue took).
  void LayerNormResidualAdds();
  // add(embedding_grad, other [resize_rows that drops rows]) as one embedding_grad_add, or, with
  // `in_place` where the memory plan may, embedding_grad_accumulate written over `other`
  // (fuse_embedding_rules.cc).
  void EmbeddingGradientSums(bool in_place);
  // add(conv2d_dgrad, acc) as conv2d_dgrad_accumulate (in place) or, `apart`, conv2d_dgrad_add
  // (fuse_library_rules.cc).
  void ConvDgradAccumulations(bool apart);
  void PointwiseChains();
  // sgd_momentum (folding widening gradient casts in, if asked; with sgd_one_launch, as
  // SgdOneLaunch where it applies) and adam.
  void MultiTensorUpdates(bool fold_gradient_casts, bool sgd_one_launch);
  // The non-finite guard's check and the gradient norm over the same gradients as one pass
  // (grad_sum_squares_nonfinite, fuse_optimizer_rules.cc).
  void NonfiniteChecksWithTheNorm();
  // Groups the casts of float32 parameters to each 16-bit type (mixed precision's weight copies)
  // into one cast_multi, placed at the first: one launch instead of one per parameter.
  void ParameterCasts();
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
  // A column_sum reading `v` that no group has taken, if any.
  const Node* FreeColumnSumOf(Value v) const;
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
      if (!PlaceableNow(group)) return false;
    }
    for (NodeGroup& group : groups) TryAdd(std::move(group));
    return true;
  }
  bool TryAdd(NodeGroup group) {
    if (!PlaceableNow(group)) return false;
    for (int32_t m : group.members) taken_[m] = true;
    groups_.push_back(std::move(group));
    return true;
  }
  // Groups every `single` node sharing inputs after the first `per_tensor` into a `multi` node.
  void MultiTensor(const ir::OpDef& single, const ir::OpDef& multi, int per_tensor,
                   absl::string_view name, bool fold_gradient_casts = false);
  // The free updates of `op` for which `wanted` holds, grouped by data-parallel bucket (the
  // all-reduce making the gradient, or -1), by their inputs after the first `per_tensor` but the
  // one at `weight_decay`, and by attributes: the groups a multi-tensor update taking the weight
  // decay per tensor can serve, each in node order.
  using ByHyper = std::map<std::tuple<int32_t, std::vector<std::pair<int32_t, int32_t>>, Attrs>,
                           std::vector<int32_t>>;
  ByHyper ByHyperparameters(const ir::OpDef& op, int per_tensor, int weight_decay,
                            absl::FunctionRef<bool(const Node&)> wanted) const;
  // Groups every sgd_momentum node that reads a clip coefficient or a check, sharing inputs other
  // than the weight decay, into one sgd_multi (fold_gradient_casts as MultiTensor's).
  void SgdOneLaunch(bool fold_gradient_casts);
  // One such group, `updates` with `attrs`; false if it could not be placed.
  bool SgdGroup(const std::vector<int32_t>& updates, const Attrs& attrs, bool fold_casts,
                int index);
  // Groups every adam node sharing inputs other than the weight decay into one adam_multi, with
  // the lr_schedule and clip_coefficient that only it reads and (fold_casts) the widening casts of
  // 16-bit gradients that only an update reads; the group in `updates`, `attrs` those of its
  // nodes. False if it could not be placed.
  bool AdamGroup(const std::vector<int32_t>& updates, const Attrs& attrs, bool fold_scalars,
                 bool fold_casts, int index);
  // Each of `updates`' first `per_tensor` inputs and its input `weight_decay`, appended to the
  // group's inputs (a multi-tensor update taking the weight decay per tensor); with fold_casts, a
  // 16-bit gradient's widening cast that only its update reads is taken in (FoldableGradientCast).
  void AddPerTensorInputs(NodeGroup& group, const std::vector<int32_t>& updates, int per_tensor,
                          int weight_decay, bool fold_casts) const;
  // The widening cast of a 16-bit gradient that `update` (its gradient input `input`) alone reads,
  // which a multi-tensor update can take in; nullptr if none.
  const Node* FoldableGradientCast(const Node& update, int input) const;
  // Where `node`'s values are made once the groups found so far are formed: the node itself, or the
  // place of the group that took it (its first or last member).
  int32_t PlacedAt(int32_t node) const;
  // GroupPlaceable, and for a group placed at its first member, every input made before it once
  // the groups found so far are formed.
  bool PlaceableNow(const NodeGroup& group) const;
  // Whether every value of `node` is read by `members` alone.
  bool OnlyReadBy(const Node& node, const absl::flat_hash_set<int32_t>& members) const;
  // Adds `forward` (matmul_bias with relu) with its backward as cuBLASLt epilogues, if it has the
  // pattern; false leaves both to the caller.
  bool ReluBackwardEpilogue(NodeGroup& forward, const Node& relu);
  // The backward of the GELU layer whose pre-activation is `pre`: its gelu_grad and the
  // data-gradient matmul feeding it, as one matmul_dgelu; nullopt if absent.
  std::optional<NodeGroup> GeluBackward(Value pre) const;
  // Whether `ancestor` is `node` or one of the nodes it depends on.
  bool DependsOn(int32_t node, int32_t ancestor) const;
  // Whether a fused node that starts with `first` may write its output `sum` over `acc`, which
  // its member `reader` reads, as the memory plan requires (ConvDgradAccumulations,
  // EmbeddingGradientSums).
  bool CanWriteOver(Value acc, Value sum, const Node& first, const Node& reader) const;
  // The beta of the batch norm whose statistics `grad` (batch_norm_grad) reads, where `act` is a
  // ReLU applied right to that batch norm's output (batch_norm_train's, or the mirror pass's
  // batch_norm_apply of the same x and statistics): its mask can then come from x.
  std::optional<Value> BetaOfReluInput(Value act, const Node& grad) const;
  // With batch_norm_grad_sums: the add making relu_grad's dy taken into `group`, if it may be.
  void TakeGradientSum(const Node& relu_grad, NodeGroup& group) const;
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
  // A fused batch norm's ReLU (its node in the old graph) -> the keep bits its forward writes.
  absl::flat_hash_map<int32_t, Value> relu_bits_;
};

// A family of fusion rules behind one switch of FuseOptions.
struct FusionRule {
  const char* name;
  bool (*enabled)(const FuseOptions& options);
  void (*find)(GroupFinder& finder, const FuseOptions& options);
};

// Every family, in the order Fuse runs them.
absl::Span<const FusionRule> FusionRules();

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_RULES_H_
