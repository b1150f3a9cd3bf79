#include "src/passes/fuse.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "src/ops/batched.h"
#include "src/ops/cast.h"
#include "src/ops/conv.h"
#include "src/passes/fuse_batched.h"
#include "src/passes/fuse_checked_sgd.h"
#include "src/passes/fuse_mlp_step.h"
#include "src/passes/fuse_rules.h"
#include "src/passes/parameter_copies.h"
#include "src/passes/rewrite.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

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

int32_t GroupFinder::PlacedAt(int32_t node) const {
  if (!taken_[node]) return node;
  for (const NodeGroup& group : groups_) {
    if (std::find(group.members.begin(), group.members.end(), node) == group.members.end())
      continue;
    const auto [lo, hi] = std::minmax_element(group.members.begin(), group.members.end());
    return group.at_first_member ? *lo : *hi;
  }
  return node;
}

bool GroupFinder::PlaceableNow(const NodeGroup& group) const {
  if (!GroupPlaceable(g_, consumers_, group)) return false;
  if (!group.at_first_member) return true;
  const int32_t first = *std::min_element(group.members.begin(), group.members.end());
  for (int32_t m : group.members) {
    for (const Value& v : g_.node(m).inputs) {
      if (!ir::IsLeaf(g_.node(v.node)) && PlacedAt(v.node) >= first) return false;
    }
  }
  return true;
}

bool GroupFinder::OnlyReadBy(const Node& node, const absl::flat_hash_set<int32_t>& members) const {
  for (int out = 0; out < static_cast<int>(node.outputs.size()); ++out) {
    if (NeededOutside(Value{node.id, out}, members)) return false;
  }
  return true;
}

absl::Span<const FusionRule> FusionRules() {
  static constexpr FusionRule kRules[] = {
      {"loss with its gradient", [](const FuseOptions& o) { return o.loss_with_grad; },
       [](GroupFinder& f, const FuseOptions& o) {
         if (o.head_loss_chunks != 0 && o.head_loss_chunks != 1) {
           f.HeadLossChunks(o.head_loss_chunks, o.head_loss_chunks_min_elements);
         }
         f.LossWithGrad();
       }},
      {"batch norm activations", [](const FuseOptions& o) { return o.batch_norm_activations; },
       [](GroupFinder& f, const FuseOptions& o) {
         if (o.conv_batch_norm_stats) f.ConvBatchNormStats();
         f.BatchNormActivations(o.batch_norm_relu_bits, o.batch_norm_grad_sums,
                                o.batch_norm_grad_sums_min_elements);
         f.BatchNormApplyChains();
         f.PoolingOfRecomputedActivations();
         f.PoolingArgmaxInForward();
         f.BatchNormApplyActivations();
       }},
      {"GELU and residual epilogues",
       [](const FuseOptions& o) {
         return o.gemm_epilogues && (o.gelu_epilogues || o.residual_epilogues);
       },
       [](GroupFinder& f, const FuseOptions& o) {
         if (o.gelu_epilogues) f.GeluEpilogues(o.gelu_backward_epilogue);
         if (o.residual_epilogues) f.ResidualEpilogues();
       }},
      {"layer norm residual adds", [](const FuseOptions& o) { return o.layer_norm_residual; },
       [](GroupFinder& f, const FuseOptions& o) {
         f.LayerNormResidualGradients(o.layer_norm_bias_sums);
         if (o.layer_norm_bias_sums) f.LayerNormGradientColumnSums();
         f.LayerNormResidualAdds();
       }},
      {"embedding gradient sums", [](const FuseOptions& o) { return o.embedding_gradient_sums; },
       [](GroupFinder& f, const FuseOptions& o) {
         f.EmbeddingGradientSums(o.embedding_gradient_in_place);
       }},
      {"GEMM epilogues", [](const FuseOptions& o) { return o.gemm_epilogues; },
       [](GroupFinder& f, const FuseOptions& o) { f.GemmEpilogues(o.relu_backward_epilogues); }},
      {"data gradient accumulation", [](const FuseOptions& o) { return o.conv_dgrad_accumulate; },
       [](GroupFinder& f, const FuseOptions& o) {
         f.ConvDgradAccumulations(o.conv_dgrad_add_apart);
       }},
      {"pointwise chains", [](const FuseOptions& o) { return o.pointwise_chains; },
       [](GroupFinder& f, const FuseOptions&) { f.PointwiseChains(); }},
      {"bias gradients in weight-gradient epilogues",
       [](const FuseOptions& o) { return o.gemm_epilogues && o.weight_gradient_bias_sums; },
       [](GroupFinder& f, const FuseOptions&) { f.WeightGradientBiasSums(); }},
      {"multi-tensor optimizer", [](const FuseOptions& o) { return o.multi_tensor_optimizer; },
       [](GroupFinder& f, const FuseOptions& o) {
         if (o.nonfinite_check_with_norm) f.NonfiniteChecksWithTheNorm();
         f.MultiTensorUpdates(o.fold_gradient_casts, o.sgd_one_launch);
       }},
      {"parameter casts", [](const FuseOptions& o) { return o.multi_tensor_casts; },
       [](GroupFinder& f, const FuseOptions&) { f.ParameterCasts(); }},
  };
  return kRules;
}

namespace {

// The whole step as one group (its barrier state added to `source`), or why not in `declined`.
std::optional<NodeGroup> MatchWholeStep(Graph& source, const autodiff::TrainingGraph& training,
                                        absl::Span<const Value> kept, const FuseOptions& options,
                                        std::string* declined) {
  // A sum of models' losses is an ensemble's step; anything else is tried as one MLP.
  if (training.graph.node(training.loss.node).op == &ops::ModelSumOp()) {
    return MatchBatchedMlpTrainStep(source, training, kept, options.mlp_step_target,
                                    options.whole_step_max_models, declined);
  }
  return MatchMlpTrainStep(source, training, kept, options.mlp_step_target, declined);
}

}  // namespace

absl::StatusOr<FusedTraining> Fuse(const autodiff::TrainingGraph& training,
                                   absl::Span<const Value> kept, const FuseOptions& options) {
  FusedTraining fused;
  Graph source = training.graph;  // The whole-step match and the checked update add state here.
  std::vector<NodeGroup> groups;
  if (options.whole_mlp_step) {
    std::optional<NodeGroup> whole =
        MatchWholeStep(source, training, kept, options, &fused.whole_step_declined);
    if (whole.has_value()) groups.push_back(*std::move(whole));
  }
  if (groups.empty()) {
    GroupFinder finder(training.graph, kept);
    for (const FusionRule& rule : FusionRules()) {
      if (rule.enabled(options)) rule.find(finder, options);
    }
    groups = finder.TakeGroups();
    AddBatchedGroups(training.graph, kept, options, groups);  // Ensembles' batched layers.
    if (options.multi_tensor_optimizer && options.sgd_checks_in_launch) {
      FoldGuardIntoSgdLaunch(source, training.graph, groups);  // Its barrier state into source.
    }
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
  if (options.update_writes_copies) {
    std::vector<Value> fused_kept;
    for (const Value& v : kept) {
      if (auto it = fused.values.find(v); it != fused.values.end())
        fused_kept.push_back(it->second);
    }
    RETURN_IF_ERROR(KeepParameterCopies(fused, fused_kept));
  }
  return fused;
}

}  // namespace reprise::passes
