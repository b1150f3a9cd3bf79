// Ensembles: K models built side by side in one graph, for the ensemble batching pass to find.
#include "absl/strings/str_cat.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/util/status_macros.h"

namespace reprise::models {

namespace {
absl::StatusOr<std::vector<Value>> EnsembleSteps(Graph& graph, int models,
                                                 const ModelBuilder& build) {
  if (models < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an ensemble needs at least one model, got ", models));
  }
  std::vector<Value> losses;
  for (int k = 0; k < models; ++k) {
    ASSIGN_OR_RETURN(const Value loss, build(graph, absl::StrCat("m", k, "."), k));
    losses.push_back(loss);
  }
  return losses;
}
}  // namespace

absl::StatusOr<std::vector<Value>> Ensemble(Graph& graph, int models, const ModelBuilder& build) {
  return Transactional(graph, [&] { return EnsembleSteps(graph, models, build); });
}

namespace {
absl::StatusOr<Value> SumLossesSteps(Graph& graph, absl::Span<const Value> losses,
                                     absl::string_view name) {
  if (losses.empty()) return absl::InvalidArgumentError("SumLosses needs at least one loss");
  // Checked here, not left to the adds: a single loss is returned without one.
  for (size_t i = 0; i < losses.size(); ++i) {
    absl::StatusOr<TensorSpec> spec = graph.SpecOf(losses[i]);
    if (!spec.ok() || spec->shape.rank() != 0 || !IsFloat(spec->dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SumLosses: loss ", i, " must be a float scalar of the graph, got ",
                       spec.ok() ? spec->ToString() : std::string(spec.status().message())));
    }
  }
  if (losses.size() == 1) return losses[0];
  Value total = losses[0];
  for (size_t i = 1; i < losses.size(); ++i) {
    const std::string add_name =
        i + 1 == losses.size() ? std::string(name) : absl::StrCat(name, ".partial", i);
    ASSIGN_OR_RETURN(total, nn::Add(graph, total, losses[i], add_name));
  }
  return total;
}
}  // namespace

absl::StatusOr<Value> SumLosses(Graph& graph, absl::Span<const Value> losses,
                                absl::string_view name) {
  return Transactional(graph, [&] { return SumLossesSteps(graph, losses, name); });
}

absl::StatusOr<MlpEnsemble> BuildMlpEnsemble(int models, const MlpConfig& config) {
  MlpEnsemble ensemble;
  ASSIGN_OR_RETURN(ensemble.losses,
                   Ensemble(ensemble.graph, models,
                            [&](Graph& g, absl::string_view prefix, int) -> absl::StatusOr<Value> {
                              ASSIGN_OR_RETURN(const MlpValues mlp, AddMlp(g, config, prefix));
                              ensemble.features.push_back(mlp.features);
                              ensemble.labels.push_back(mlp.labels);
                              ensemble.logits.push_back(mlp.logits);
                              return mlp.loss;
                            }));
  ASSIGN_OR_RETURN(ensemble.loss, SumLosses(ensemble.graph, ensemble.losses, "loss"));
  return ensemble;
}

}  // namespace reprise::models
