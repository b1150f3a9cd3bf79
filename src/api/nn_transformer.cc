// The transformer layer builders of reprise/nn.h: layer norm, GELU, token and position embeddings.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reprise/nn.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::nn {
namespace {

// Uniform(-a, a) has standard deviation a / sqrt(3).
Initializer UniformWithStd(double std) {
  const double bound = std * std::sqrt(3.0);
  return Initializer::Uniform(-bound, bound);
}

absl::Status CheckPositive(absl::string_view layer, absl::string_view name, absl::string_view what,
                           double value) {
  if (!(value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, " '", name, "': ", what, " must be positive, got ", value));
  }
  return absl::OkStatus();
}

// The builders that add a parameter and then an op: the public ones below run them transactionally,
// so that a refused op leaves no parameter behind.
absl::StatusOr<Value> LayerNormSteps(Graph& graph, Value x, absl::string_view name,
                                     double epsilon) {
  ASSIGN_OR_RETURN(TensorSpec x_spec, graph.SpecOf(x));
  if (x_spec.shape.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LayerNorm '", name, "': input must be [..., C], got ", x_spec.ToString()));
  }
  const TensorSpec per_column{Shape{x_spec.shape.dim(x_spec.shape.rank() - 1)}, x_spec.dtype};
  ASSIGN_OR_RETURN(Value weight, graph.AddParameter(absl::StrCat(name, ".weight"), per_column,
                                                    Initializer::Constant(1.0)));
  ASSIGN_OR_RETURN(Value bias, graph.AddParameter(absl::StrCat(name, ".bias"), per_column,
                                                  Initializer::Zeros()));
  ASSIGN_OR_RETURN(
      std::vector<Value> outputs,
      graph.AddOp(ops::LayerNormOp(), name, {x, weight, bias}, {{"epsilon", epsilon}}));
  return outputs[0];  // The saved statistics feed only the gradient.
}

absl::StatusOr<Value> EmbeddingSteps(Graph& graph, Value ids, int64_t vocab, int64_t width,
                                     absl::string_view name, double init_std) {
  RETURN_IF_ERROR(CheckPositive("Embedding", name, "vocab", static_cast<double>(vocab)));
  RETURN_IF_ERROR(CheckPositive("Embedding", name, "width", static_cast<double>(width)));
  RETURN_IF_ERROR(CheckPositive("Embedding", name, "init_std", init_std));
  ASSIGN_OR_RETURN(Value table, graph.AddParameter(absl::StrCat(name, ".weight"),
                                                   {Shape{vocab, width}, DType::kFloat32},
                                                   UniformWithStd(init_std)));
  return graph.AddOp1(ops::EmbeddingOp(), name, {ids, table});
}

absl::StatusOr<Value> PositionEmbeddingSteps(Graph& graph, Value x, int64_t max_positions,
                                             int64_t positions, absl::string_view name,
                                             double init_std) {
  ASSIGN_OR_RETURN(TensorSpec x_spec, graph.SpecOf(x));
  RETURN_IF_ERROR(CheckPositive("PositionEmbedding", name, "max_positions",
                                static_cast<double>(max_positions)));
  RETURN_IF_ERROR(CheckPositive("PositionEmbedding", name, "init_std", init_std));
  if (x_spec.shape.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PositionEmbedding '", name, "': input must be [..., T, C], got ", x_spec.ToString()));
  }
  const int64_t width = x_spec.shape.dim(x_spec.shape.rank() - 1);
  ASSIGN_OR_RETURN(Value table, graph.AddParameter(absl::StrCat(name, ".weight"),
                                                   {Shape{max_positions, width}, x_spec.dtype},
                                                   UniformWithStd(init_std)));
  return graph.AddOp1(ops::AddPositionsOp(), name, {x, table}, {{"positions", positions}});
}

}  // namespace

absl::StatusOr<Value> LayerNorm(Graph& graph, Value x, absl::string_view name, double epsilon) {
  return Transactional(graph, [&] { return LayerNormSteps(graph, x, name, epsilon); });
}

absl::StatusOr<Value> Gelu(Graph& graph, Value x, absl::string_view name) {
  return graph.AddOp1(ops::GeluOp(), name, {x});
}

absl::StatusOr<Value> Embedding(Graph& graph, Value ids, int64_t vocab, int64_t width,
                                absl::string_view name, double init_std) {
  return Transactional(graph,
                       [&] { return EmbeddingSteps(graph, ids, vocab, width, name, init_std); });
}

absl::StatusOr<Value> PositionEmbedding(Graph& graph, Value x, int64_t max_positions,
                                        int64_t positions, absl::string_view name,
                                        double init_std) {
  return Transactional(graph, [&] {
    return PositionEmbeddingSteps(graph, x, max_positions, positions, name, init_std);
  });
}

}  // namespace reprise::nn
