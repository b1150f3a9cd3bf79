// The ops a GPT-2 needs beyond the MLP's: layer normalization, GELU (tanh form), token
// embeddings and position rows. Each has its shape rule, gradient rule, CPU reference (float32 and
// float64) and GPU lowering (float32, and 16-bit activations as mixed precision makes them) in
// its own file: layer_norm.cc, gelu.cc, embedding.cc, positions.cc.
#ifndef REPRISE_SRC_OPS_TRANSFORMER_OPS_H_
#define REPRISE_SRC_OPS_TRANSFORMER_OPS_H_

#include <vector>

#include "reprise/graph.h"
#include "src/codegen/generated_kernel.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

// layer_norm: (x [..., C], weight [C], bias [C]) -> (y like x, mean [R], rstd [R]), R the product
// of x's leading dimensions. Attr epsilon (double, default 1e-5, finite and >= 0). Per row:
// mean, rstd = 1 / sqrt(biased variance + epsilon), y = (x - mean)·rstd·weight + bias, as
// torch.nn.LayerNorm(C). weight and bias have x's dtype, or float32 beside 16-bit x (mixed
// precision); mean and rstd have weight's dtype. Gradient: one layer_norm_grad node; no gradient
// may flow into mean or rstd (Unimplemented otherwise).
const ir::OpDef& LayerNormOp();
// layer_norm_grad: (dy, x, weight, mean, rstd) -> (dx, dweight, dbias), attrs as the forward.
// With x̂ = (x - mean)·rstd and g = dy·weight per row: dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),
// dweight = Σ_rows dy·x̂, dbias = Σ_rows dy.
const ir::OpDef& LayerNormGradOp();
// The layer-norm backward kernel with its width compiled in (the warp-per-row form of
// src/codegen/layer_norm_backward_kernels.h) that a layer_norm_grad or layer_norm_grad_add node
// of `graph` launches, for warming the kernel store before lowering; none for other nodes.
std::vector<codegen::GeneratedKernel> SizedLayerNormKernelsOf(const Graph& graph, const Node& node);

// gelu: y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))), PyTorch's approximate='tanh'.
// Pointwise and chainable into fused pointwise kernels (src/codegen/gelu_kernels.h).
const ir::OpDef& GeluOp();
// gelu_grad: (dy, x) -> dx = dy·gelu'(x).
const ir::OpDef& GeluGradOp();

// embedding: (ids i32 [...], table [V, C]) -> [..., C], out[t] = table[ids[t]] (F.embedding's
// argument order). An id outside [0, V) is an error on the CPU reference and at
// Trainer::SetInput; the GPU writes zeros for one. Gradient (table only): embedding_grad.
const ir::OpDef& EmbeddingOp();
// embedding_grad: (dy [..., C], ids i32 [...]) -> dtable [V, C], attr vocab (int, V > 0):
// dtable[v] = Σ dy[t] over the tokens t with ids[t] = v, summed in token order: the same bits on
// every run (src/codegen/embedding_kernels.h says how the GPU keeps that order).
const ir::OpDef& EmbeddingGradOp();
// embedding_grad_add: (dy [..., C], ids i32 [...], base [R >= V, C] of dy's dtype) -> [V, C],
// attr vocab: embedding_grad's result (rounded to the dtype) plus base's first V rows, rounded as
// add rounds: a tied embedding's two gradients (GPT-2's wte and lm_head) summed in the embedding
// gradient's one pass over the table. Written by the fuse pass
// (src/passes/fuse_embedding_rules.cc), also over a resize_rows that only cut the base's padding
// rows.
const ir::OpDef& EmbeddingGradAddOp();
// embedding_grad_accumulate: embedding_grad_add written over its base (the memory plan gives the
// output the base's place, so the base must be a transient value nothing reads afterwards): the
// GPU touches only the rows tokens name, where embedding_grad_add writes the whole table. The
// same values; the fuse pass picks it where it may (FuseOptions::embedding_gradient_in_place).
const ir::OpDef& EmbeddingGradAccumulateOp();

// add_positions: (x [..., T, C] viewed as [R, C], table [P, C]) -> y like x, attr positions
// (int, T: 1 <= T <= P, R % T == 0): y[r] = x[r] + table[r % T], a position embedding's first T
// rows added to every sequence of a batch flattened to rows (GPT-2's wpe). Gradient: dy for x,
// add_positions_grad for the table.
const ir::OpDef& AddPositionsOp();
// add_positions_grad: dy [R, C] -> dtable [P, C], attrs positions (T) and table_rows (P):
// dtable[p] = Σ_b dy[b·T + p] (b in order) for p < T, zeros for p >= T.
const ir::OpDef& AddPositionsGradOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_TRANSFORMER_OPS_H_
