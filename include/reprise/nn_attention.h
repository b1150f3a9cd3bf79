// The transformer layer builders of reprise::nn (nn.h holds the rest): causal self-attention.
#ifndef REPRISE_INCLUDE_REPRISE_NN_ATTENTION_H_
#define REPRISE_INCLUDE_REPRISE_NN_ATTENTION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"

namespace reprise::nn {

// Causal multi-head self-attention, as GPT-2 computes it: per head,
// softmax(q·kᵀ / sqrt(D) + causal mask)·v, where q, k and v are [batch, seq, C] with the `heads`
// heads of width D = C / heads side by side in each row (a Linear layer's output). Returns
// [batch, seq, C] in the same layout (the output projection's input). In bfloat16 and float16
// (TrainOptions::numerics.compute_dtype) the GPU runs cuDNN's fused flash attention; in float32
// exact kernels of ours. Rank-2 inputs [batch·seq, C] (a matmul's output) need `seq` and give a
// [batch·seq, C] result. InvalidArgument, naming the layer, for specs that differ or a C that
// `heads` does not divide.
//
//   ASSIGN_OR_RETURN(Value qkv, nn::Linear(g, x, 3 * 768, "h0.attn.c_attn"));  // x [B·T, 768]
//   ASSIGN_OR_RETURN(Value y, nn::CausalAttention(g, qkv, 12, "h0.attn", /*seq=*/1024));
absl::StatusOr<Value> CausalAttention(Graph& graph, Value q, Value k, Value v, int64_t heads,
                                      absl::string_view name, int64_t seq = 0);
// The same from one packed qkv [batch, seq, 3·C] (q, k and v side by side in each row, as
// GPT-2's c_attn produces them), read in place: nothing is split or transposed.
absl::StatusOr<Value> CausalAttention(Graph& graph, Value qkv, int64_t heads,
                                      absl::string_view name, int64_t seq = 0);

}  // namespace reprise::nn

#endif  // REPRISE_INCLUDE_REPRISE_NN_ATTENTION_H_
