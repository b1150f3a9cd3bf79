// CUDA C++ source for the decode step of a transformer with a key/value cache
// (src/ops/decode_attention.h): one new token per sequence, its keys and values written into
// fixed-size caches at a position the device keeps, attention of its query over the cached rows.
//
// Layouts: qkv [B, 3·C] (q, k and v side by side in each row, heads of width D = C / H inside each,
// as GPT-2's c_attn produces them); caches [B, P, C] (row p of sequence b holds the keys, or the
// values, of its position p, heads side by side); y [B, C]; position int32 [1]. Elements are the
// kernel's `dtype` (src/codegen/element_type.h), sums in float in a fixed order (no atomics), so
// a replay gives the bits of an eager run.
#ifndef REPRISE_SRC_CODEGEN_DECODE_KERNELS_H_
#define REPRISE_SRC_CODEGEN_DECODE_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

inline constexpr int kDecodeAttentionBlock = 128;

// Dynamic shared memory of reprise_decode_attention: the query (head_dim floats) and one score
// per cached position (max_positions floats).
inline int64_t DecodeAttentionSharedBytes(int64_t max_positions, int64_t head_dim) {
  return (max_positions + head_dim) * static_cast<int64_t>(sizeof(float));
}

// reprise_decode_attention: grid (H, B), kDecodeAttentionBlock threads. With p = position[0]:
// writes this token's k and v of head h into row p of the caches, then
// y[b, h] = softmax(scale·q·K[0..p]ᵀ)·V[0..p]. A p outside [0, max_positions) writes nothing to
// the caches and NaN to y. Signature: (const elem_t* qkv, elem_t* k_cache, elem_t* v_cache,
// const int* position, elem_t* y, int heads, int head_dim, int max_positions, float scale).
GeneratedKernel DecodeAttention(DType dtype = DType::kFloat32);

// reprise_add_position_at: y[b, c] = x[b, c] + table[position[0], c] over [rows, cols]
// (grid-stride); NaN for a position outside [0, table_rows). Signature: (const elem_t* x,
// const elem_t* table, const int* position, elem_t* y, long long rows, int cols, int table_rows).
GeneratedKernel AddPositionAt(DType dtype = DType::kFloat32);

// reprise_advance_position: position[0] += 1 in place; next[0] = the new value. One thread.
// Signature: (int* position, int* next).
GeneratedKernel AdvancePosition();

// Every kernel above in every kernel element type, for compile checks.
std::vector<GeneratedKernel> DecodeKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_DECODE_KERNELS_H_
