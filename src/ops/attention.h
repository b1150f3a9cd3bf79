// Causal multi-head self-attention (GPT-2's): y = softmax(q·kᵀ/sqrt(D) + causal mask)·v per head,
// with its gradient. On the GPU, bfloat16 and float16 run cuDNN's fused flash attention
// (src/runtime/cudnn_sdpa.h); float32, and 16-bit shapes cuDNN refuses, run our own exact kernels
// (src/codegen/attention_kernels.h). CPU references in float32 and float64.
//
// Two forms, by arity; attr heads (int64, H) in both, D = C / H:
//   packed:   (qkv [B, T, 3·C])      -> (y [B, T, C], stats [B, H, T])
//             qkv holds q, k and v side by side in each row, as GPT-2's c_attn produces them
//             ([B, T, 3, H, D]); read through strides, nothing is split or transposed.
//   separate: (q, k, v [B, T, C])    -> (y, stats)
// Either form may also be rank 2, [B·T, ...] as a matmul leaves it, with attr seq (int64, T); y
// then is [B·T, C]. y is [B, T, H, D] in memory, what the output projection reads. stats holds each
// query's log-sum-exp of scaled scores (float32, float64 for float64 inputs), saved for the
// gradient; no gradient flows into it.
//
//   ASSIGN_OR_RETURN(std::vector<Value> out,
//                    g.AddOp(ops::CausalAttentionOp(), "h0.attn", {qkv}, {{"heads",
//                    int64_t{12}}}));
#ifndef REPRISE_SRC_OPS_ATTENTION_H_
#define REPRISE_SRC_OPS_ATTENTION_H_

#include <cstddef>

#include "src/ir/op_def.h"

namespace reprise::ops {

// causal_attention. Shape errors (InvalidArgument) name the shapes: rank other than 3, a width
// not divisible by 3·heads (packed) or heads, q, k and v of different specs, a non-float dtype.
// Gradient: causal_attention_grad.
const ir::OpDef& CausalAttentionOp();

// causal_attention_grad: packed (qkv, y, stats, dy) -> dqkv [B, T, 3·C]; separate
// (q, k, v, y, stats, dy) -> (dq, dk, dv). Attr heads; attr deterministic is not needed: the
// lowering follows TrainOptions::numerics.deterministic.
const ir::OpDef& CausalAttentionGradOp();

// An upper bound of the workspace cuDNN's attention backward may ask for in one lane at the
// shapes of `graph`'s causal_attention_grad nodes (its float32 dQ accumulator and softmax sums,
// and the deterministic algorithm's [B, H, T, T] scratch): what a Trainer reserves per lane. The
// reserve is address space; only what the chosen plans use is backed by memory. 0 without such
// nodes.
size_t AttentionWorkspaceBound(const Graph& graph);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_ATTENTION_H_
