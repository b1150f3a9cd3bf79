// CUDA C++ source for token embeddings (src/ops/transformer_ops.h's embedding, embedding_grad,
// add_positions and add_positions_grad). Tables are row-major [rows, cols]; ids are int32.
//
// Element types: tables, activations and gradients hold the `dtype` a kernel is generated for
// (float32, bfloat16 or float16, src/codegen/element_type.h); sums run in float and round once.
//
// The embedding gradient is a scatter-add that must give the same bits on every run (so that a
// replayed step equals the eager one), hence no float atomics. Tokens are cut into chunks of
// kEmbeddingChunk; each chunk's keys id·kEmbeddingChunk + (token within the chunk) are sorted in
// one block (a bitonic sort in shared memory). The keys are distinct, so the sorted chunk is the
// same whatever order the sort compared them in. Then one warp per vocabulary row finds its
// tokens in every chunk by binary search and sums their gradient rows in (chunk, token) order:
// token order, fixed by the data alone. Rows no token names get zeros. The work is one pass over
// dy per token plus one write of the table, and no thread block scans all the ids.
#ifndef REPRISE_SRC_CODEGEN_EMBEDDING_KERNELS_H_
#define REPRISE_SRC_CODEGEN_EMBEDDING_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Tokens per sorted chunk: one block of this many threads sorts one chunk.
inline constexpr int kEmbeddingChunk = 1024;
// The largest vocabulary whose keys fit in 32 bits (id·kEmbeddingChunk + 1023 < 2^32 - 1, the
// key of padding and of ids outside the table).
inline constexpr int64_t kEmbeddingMaxVocab = (int64_t{1} << 32) / kEmbeddingChunk - 1;

// out[t, c] = table[ids[t], c]; zeros for an id outside [0, vocab) (the host refuses those
// before they get here). Grid-stride over tokens·cols. Name reprise_embedding. Signature:
// (const int* ids, const elem_t* table, elem_t* out, long long tokens, int cols, int vocab).
GeneratedKernel EmbeddingForward(DType dtype);

// Sorts chunk blockIdx.x's keys into keys[blockIdx.x·kEmbeddingChunk ...], padding past the last
// token (and ids outside [0, vocab)) with 0xffffffff. Blocks of kEmbeddingChunk threads, one per
// chunk. Name reprise_embedding_sort_chunks. Signature: (const int* ids, unsigned* keys,
// long long tokens, int vocab).
GeneratedKernel EmbeddingSortChunks();

// dtable[v, c] = Σ dy[t, c] over the tokens t with ids[t] = v, in token order, from the sorted
// chunks; where `base` is not null, plus base[v, c] (the sum rounded to elem_t first, then the
// total: embedding_grad_add). One warp per vocabulary row, kEmbeddingGradRowsPerBlock rows per
// block (grid = ceil(vocab / kEmbeddingGradRowsPerBlock), block 32·kEmbeddingGradRowsPerBlock),
// with EmbeddingGradSharedBytes(chunks) of dynamic shared memory. `vector` != 0 only where
// cols % 4 == 0 and dy, base and dtable are aligned to four elements. Name reprise_embedding_grad.
// Signature: (const unsigned* keys, const elem_t* dy, const elem_t* base, elem_t* dtable,
// int chunks, int cols, int vocab, int vector).
inline constexpr int kEmbeddingGradRowsPerBlock = 4;
inline constexpr int64_t EmbeddingGradSharedBytes(int64_t chunks) {
  return kEmbeddingGradRowsPerBlock * 2 * chunks * 4;
}
GeneratedKernel EmbeddingGrad(DType dtype);

// EmbeddingGrad with a base, written over the base: table[v, c] += Σ dy[t, c] (the sum rounded
// to elem_t first, as EmbeddingGrad's) only for the rows v some token names, in place; every
// other row keeps the base's value (which the out-of-place sum gives too, bar a -0.0 there that
// 0 + -0.0 makes +0.0). One warp per key slot of the sorted chunks, kEmbeddingGradRowsPerBlock a
// block (grid = ceil(chunks·kEmbeddingChunk / kEmbeddingGradRowsPerBlock)), with
// EmbeddingGradSharedBytes(chunks) of dynamic shared memory: the warp of a row's first token in
// the row's first chunk sums it; the others return at once. So its work is the tokens' dy rows
// and their table rows, not the whole table. `vector` as EmbeddingGrad's. Name
// reprise_embedding_grad_in_place. Signature: (const unsigned* keys, const elem_t* dy,
// elem_t* table, int chunks, int cols, int vector).
GeneratedKernel EmbeddingGradInPlace(DType dtype);

// y[r, c] = x[r, c] + table[r % positions, c]: position rows added to every sequence of a
// [rows = batch·positions, cols] activation. Grid-stride. Name reprise_add_positions. Signature:
// (const elem_t* x, const elem_t* table, elem_t* y, long long rows, int cols, int positions).
GeneratedKernel AddPositions(DType dtype);

// dtable[p, c] = Σ_b dy[b·positions + p, c] for p < positions (b in order), 0 for the table's
// further rows. Grid-stride over table_rows·cols. Name reprise_add_positions_grad. Signature:
// (const elem_t* dy, elem_t* dtable, long long rows, int cols, int positions, int table_rows).
GeneratedKernel AddPositionsGrad(DType dtype);

// The same three with 16-byte loads and stores, VEC elements a thread (src/codegen/vector16.h):
// only where cols % VEC == 0 and the tensors they load or store (table and out; x, table and y;
// dy and dtable) are 16-byte aligned (Aligned16). Each element's arithmetic and order are the
// scalar kernel's, so are its bits. Grid-stride over the vectors. Names reprise_embedding_vec,
// reprise_add_positions_vec and reprise_add_positions_grad_vec; signatures as above.
GeneratedKernel EmbeddingForwardVec(DType dtype);
GeneratedKernel AddPositionsVec(DType dtype);
GeneratedKernel AddPositionsGradVec(DType dtype);

// Every kernel above for every kernel element type, for compile checks and the kernel store.
std::vector<GeneratedKernel> EmbeddingKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_EMBEDDING_KERNELS_H_
