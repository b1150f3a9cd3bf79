// Trainer::Impl under ensemble batching: the models' own names for the slices of stacked tensors
// (src/passes/batch_ensemble.h), so inputs, parameters and weight files stay per model.
#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/ir/op_def.h"

namespace reprise {

void Trainer::Impl::SetEnsemble(const Graph& user, passes::BatchedGraph batched,
                                const Graph& training) {
  if (!batched.groups.empty()) {
    for (int32_t id : user.NodesOf("parameter"))
      user_parameter_names_.push_back(user.node(id).name);
  }
  for (passes::ModelTensor& t : passes::ModelTensorNames(training, batched)) {
    model_names_[t.stacked].push_back(t.name);
    std::string name = t.name;
    model_tensors_.emplace(std::move(name), std::move(t));
  }
  batched.graph = Graph();  // Only the maps are needed from here on.
  ensemble_ = std::move(batched);
  for (const passes::StackedLeaf& leaf : ensemble_.stacked) stacked_leaves_[leaf.name] = &leaf;
}

absl::StatusOr<Trainer::Impl::NamedTensor> Trainer::Impl::Resolve(absl::string_view name,
                                                                  const ir::OpDef& kind,
                                                                  absl::string_view what) const {
  const Graph& g = plan_.graph();
  auto not_found = [&] {
    return absl::NotFoundError(absl::StrCat("no ", what, " named '", name, "'"));
  };
  if (absl::StatusOr<int32_t> id = g.FindNode(name); id.ok()) {
    if (g.node(*id).op != &kind) return not_found();
    return NamedTensor{*id, 0, g.node(*id).outputs[0]};
  }
  auto it = model_tensors_.find(name);
  if (it == model_tensors_.end()) return not_found();
  absl::StatusOr<int32_t> id = g.FindNode(it->second.stacked);
  if (!id.ok() || g.node(*id).op != &kind) return not_found();
  const TensorSpec& stacked = g.node(*id).outputs[0];
  std::vector<int64_t> dims(stacked.shape.dims().begin() + 1, stacked.shape.dims().end());
  NamedTensor t{*id, 0, {Shape(std::move(dims)), stacked.dtype}};
  t.offset = it->second.model * t.spec.bytes();
  return t;
}

}  // namespace reprise
