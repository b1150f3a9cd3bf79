// CUDA C++ source for causal attention computed by our own kernels: the float32 path (cuDNN's
// fused attention takes only 16-bit data) and 16-bit shapes cuDNN refuses. Simple and exact rather
// than fast: one block per (query or key position, head, batch) that keeps a whole row of scores in
// shared memory, every sum in a fixed order (no atomics), so every run gives the same bits.
//
// Layout as src/runtime/cudnn_sdpa.h: Q, K and V are [B, T, H, D] in memory with `row` elements
// between sequence positions (3·H·D for a packed [B, T, 3, H, D] tensor, H·D for separate ones;
// dQ, dK and dV likewise); O and dO are [B, T, H, D] with rows of H·D; stats is float32 [B, H, T],
// the log-sum-exp of each query's scaled scores. Masked scores (key after query) are left out.
// Launch each with grid (T, H, B), kAttentionBlock threads and AttentionSharedBytes() of dynamic
// shared memory.
#ifndef REPRISE_SRC_CODEGEN_ATTENTION_KERNELS_H_
#define REPRISE_SRC_CODEGEN_ATTENTION_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

inline constexpr int kAttentionBlock = 128;

// Dynamic shared memory of each kernel: head_dim + seq floats (forward and dQ: the query's
// vectors and one row of scores), 2·head_dim + 2·seq (dK/dV: the key's vectors, probabilities and
// score gradients of one column).
inline int64_t AttentionSharedBytes(int64_t seq, int64_t head_dim) {
  return (2 * seq + 2 * head_dim) * static_cast<int64_t>(sizeof(float));
}

// reprise_attention_fwd: o = softmax(scale·q·kᵀ, causal) v and stats. Signature:
// (const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, float* stats, int seq,
// int heads, int head_dim, long long row, float scale).
GeneratedKernel AttentionForward(DType dtype = DType::kFloat32);

// reprise_attention_bwd_dq: dq from (q, k, v, o, do, stats); one block per query position.
// Signature: (const elem_t* q, const elem_t* k, const elem_t* v, const elem_t* o,
// const elem_t* d_o, const float* stats, elem_t* dq, int seq, int heads, int head_dim,
// long long row, float scale).
GeneratedKernel AttentionBackwardDq(DType dtype = DType::kFloat32);

// reprise_attention_bwd_dkv: dk and dv; one block per key position. Signature: (const elem_t* q,
// const elem_t* k, const elem_t* v, const elem_t* o, const elem_t* d_o, const float* stats,
// elem_t* dk, elem_t* dv, int seq, int heads, int head_dim, long long row, float scale).
GeneratedKernel AttentionBackwardDkv(DType dtype = DType::kFloat32);

// The three kernels in float32, bfloat16 and float16, for compile checks and prefetching.
std::vector<GeneratedKernel> AttentionKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_ATTENTION_KERNELS_H_
