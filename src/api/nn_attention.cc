// nn::CausalAttention: the causal_attention op (src/ops/attention.h) behind the layer API.
#include "reprise/nn_attention.h"

#include <vector>

#include "src/ops/attention.h"
#include "src/util/status_macros.h"

namespace reprise::nn {
namespace {

absl::StatusOr<Value> Attention(Graph& graph, std::vector<Value> inputs, int64_t heads,
                                absl::string_view name, int64_t seq) {
  Attrs attrs{{"heads", heads}};
  if (seq > 0) attrs["seq"] = seq;
  ASSIGN_OR_RETURN(std::vector<Value> out,
                   graph.AddOp(ops::CausalAttentionOp(), name, std::move(inputs), attrs));
  return out[0];  // out[1], the saved statistics, only feeds the gradient.
}

}  // namespace

absl::StatusOr<Value> CausalAttention(Graph& graph, Value q, Value k, Value v, int64_t heads,
                                      absl::string_view name, int64_t seq) {
  return Attention(graph, {q, k, v}, heads, name, seq);
}

absl::StatusOr<Value> CausalAttention(Graph& graph, Value qkv, int64_t heads,
                                      absl::string_view name, int64_t seq) {
  return Attention(graph, {qkv}, heads, name, seq);
}

}  // namespace reprise::nn
