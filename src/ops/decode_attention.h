// The decode step of a transformer with a fixed-size key/value cache: one new token per sequence
// per replay, its keys and values appended to caches that persist between replays (state
// tensors), at a position counter the device keeps and advances (so a captured decode step
// replays with no host input but the tokens). models::BuildGpt2Decoder builds GPT-2's from these.
//
//   decode_attention   (qkv [B, 3·C], k_cache [B, P, C], v_cache [B, P, C], position i32 [1])
//                      -> y [B, C]; attr heads (H, D = C / H). With p = position[0]: writes the
//                      token's k (qkv[:, C:2C]) and v (qkv[:, 2C:3C]) into row p of the caches
//                      (in place: the caches must be state), then per head
//                      y = softmax(q·K[0..p]ᵀ / sqrt(D))·V[0..p]: the causal attention of the
//                      token at position p over the sequence so far. Appending and attending are
//                      one op (one kernel, one block per sequence and head, which writes its own
//                      head's rows before it reads them), so nothing has to order them.
//   add_position_at    (x [B, C], table [P, C], position i32 [1]) -> x + table[position[0]]: the
//                      position embedding of the token at the current position.
//   advance_position   (position i32 [1]) -> next i32 [1]: position += 1 in place, next = the new
//                      value. The builder makes it run after every reader of the counter (control
//                      edges), so each replay reads one position and leaves the next.
//
// The caches and qkv share one float dtype, or the caches are 16-bit beside float32 qkv: a decoder
// built for a mixed-precision trainer, whose pass then makes qkv 16-bit too (a float32 cache
// would be read through a 16-bit copy, and written there). The GPU runs caches of qkv's dtype. No
// gradient flows through any of them: the decode step is forward only. A position outside [0, P) is
// an error on the CPU reference (OutOfRange naming the node); on the GPU the caches are left alone
// and the outputs are NaN, so that a step past the cache's end is never mistaken for a result
// (the generation loop refuses to run one: include/reprise/gpt2_decode.h).
#ifndef REPRISE_SRC_OPS_DECODE_ATTENTION_H_
#define REPRISE_SRC_OPS_DECODE_ATTENTION_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

const ir::OpDef& DecodeAttentionOp();
const ir::OpDef& AddPositionAtOp();
const ir::OpDef& AdvancePositionOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_DECODE_ATTENTION_H_
