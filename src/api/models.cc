#include "reprise/models.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "reprise/nn.h"
#include "src/util/status_macros.h"

namespace reprise::models {

namespace {
// The most hidden layers of an MLP: int32 node ids, 8 nodes a layer at most.
constexpr int64_t kMaxLayers = std::numeric_limits<int32_t>::max() / 8;

absl::StatusOr<MlpValues> AddMlpSteps(Graph& g, const MlpConfig& config, absl::string_view prefix) {
  if (config.batch <= 0 || config.input_features <= 0 || config.depth < 0 || config.width <= 0 ||
      config.classes <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLP needs batch, input_features, width > 0, depth >= 0 and classes > 1; got batch=",
        config.batch, " input_features=", config.input_features, " depth=", config.depth,
        " width=", config.width, " classes=", config.classes));
  }
  // Node ids are int32 and each hidden layer adds a handful of nodes: a deeper MLP could never be
  // built, and would run out of memory trying.
  if (config.depth > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("MLP depth ", config.depth, " is more than ",
                                                   kMaxLayers, " layers a graph can hold"));
  }
  MlpValues mlp;
  ASSIGN_OR_RETURN(mlp.features, g.AddInput(absl::StrCat(prefix, "features"),
                                            {Shape{config.batch, config.input_features}}));
  ASSIGN_OR_RETURN(
      mlp.labels, g.AddInput(absl::StrCat(prefix, "labels"), {Shape{config.batch}, DType::kInt32}));
  Value h = mlp.features;
  for (int64_t i = 0; i < config.depth; ++i) {
    ASSIGN_OR_RETURN(h, nn::Linear(g, h, config.width, absl::StrCat(prefix, "fc", i)));
    ASSIGN_OR_RETURN(h, nn::Relu(g, h, absl::StrCat(prefix, "fc", i, ".relu")));
  }
  ASSIGN_OR_RETURN(mlp.logits,
                   nn::Linear(g, h, config.classes, absl::StrCat(prefix, "fc", config.depth)));
  ASSIGN_OR_RETURN(
      mlp.loss, nn::SoftmaxCrossEntropy(g, mlp.logits, mlp.labels, absl::StrCat(prefix, "loss")));
  return mlp;
}
}  // namespace

absl::StatusOr<MlpValues> AddMlp(Graph& g, const MlpConfig& config, absl::string_view prefix) {
  return Transactional(g, [&] { return AddMlpSteps(g, config, prefix); });
}

absl::StatusOr<Mlp> BuildMlp(const MlpConfig& config) {
  Mlp mlp;
  ASSIGN_OR_RETURN(const MlpValues values, AddMlp(mlp.graph, config));
  mlp.features = values.features;
  mlp.labels = values.labels;
  mlp.logits = values.logits;
  mlp.loss = values.loss;
  return mlp;
}

}  // namespace reprise::models
