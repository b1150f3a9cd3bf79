// The chunked multi-tensor kernels of optimizer_kernels.h (AdamMulti, SgdMulti, GradSumSquares):
// every tensor of a table seen as one list of chunks, each tensor's gradient of its own type
// (GradKinds).
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"

namespace reprise::codegen {
namespace {

// What the chunked multi-tensor kernels add: their capacity, the gradients' kinds, and the walk
// over a chunk, for each gradient type (float, Bf16Grad, F16Grad of gradient_loads.h).
std::string ChunkedHelpers(int capacity) {
  return absl::StrCat(OptimizerHelpers(), "#define REPRISE_CAPACITY ", capacity, R"(
// A byte per tensor: 0 float32, 1 bfloat16, 2 float16. The kernels take it as a
// __grid_constant__ parameter, which they index in place (else it is copied to local memory).
struct GradKinds {
  unsigned char kind[REPRISE_CAPACITY];
};
// An inf or a NaN: every exponent bit set.
__device__ __forceinline__ int NotFiniteFloat(float x) {
  return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}
// The elements 4q .. 4q + 3 of a chunk of n: one load where the chunk is aligned and the quad
// whole, else one by one; missing elements read as 0.
template <typename G>
__device__ __forceinline__ float4 LoadQuad(const G* __restrict__ x, int q, int n, bool aligned) {
  if (aligned && 4 * q + 4 <= n) return GradQuad(x, q);
  float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (4 * q < n) r.x = GradValue(x, 4 * q);
  if (4 * q + 1 < n) r.y = GradValue(x, 4 * q + 1);
  if (4 * q + 2 < n) r.z = GradValue(x, 4 * q + 2);
  if (4 * q + 3 < n) r.w = GradValue(x, 4 * q + 3);
  return r;
}
// Elements 4q .. 4q + 3 with a streaming load (read once, not to be kept in L2), widened exactly.
__device__ __forceinline__ float4 StreamGradQuad(const float* g, int q) {
  return __ldcs((const float4*)g + q);
}
__device__ __forceinline__ float4 StreamGradQuad(const Bf16Grad* g, int q) {
  const uint2 u = __ldcs((const uint2*)g + q);
  return make_float4(Bf16Value(u.x & 0xffffu), Bf16Value(u.x >> 16), Bf16Value(u.y & 0xffffu),
                     Bf16Value(u.y >> 16));
}
__device__ __forceinline__ float4 StreamGradQuad(const F16Grad* g, int q) {
  const uint2 u = __ldcs((const uint2*)g + q);
  return make_float4(F16Value(u.x & 0xffffu), F16Value(u.x >> 16), F16Value(u.y & 0xffffu),
                     F16Value(u.y >> 16));
}
// acc + (x·inv)² for element i of n; nothing for i >= n.
__device__ __forceinline__ float AddSquare(float acc, float x, int i, int n, float inv) {
  if (i >= n) return acc;
  const float v = __fmul_rn(x, inv);
  return __fadd_rn(acc, __fmul_rn(v, v));
}
__device__ __forceinline__ void AdamQuad(const AdamStep& a, float4& w, const float4& g, float4& m,
                                         float4& v) {
  AdamElement(a, w.x, g.x, m.x, v.x);
  AdamElement(a, w.y, g.y, m.y, v.y);
  AdamElement(a, w.z, g.z, m.z, v.z);
  AdamElement(a, w.w, g.w, m.w, v.w);
}
// The bits of w's 16-bit copy (copy kind 1: bfloat16, 2: float16), rounded as cast rounds them.
__device__ __forceinline__ unsigned short CopyBits(float w, int kind) {
  unsigned short bits;
  if (kind == 1) {
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(w));
  } else {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(w));
  }
  return bits;
}
__device__ __forceinline__ void StoreCopyQuad(unsigned short* __restrict__ c, int q, float4 w,
                                              int kind) {
  const unsigned int lo = CopyBits(w.x, kind) | ((unsigned int)CopyBits(w.y, kind) << 16);
  const unsigned int hi = CopyBits(w.z, kind) | ((unsigned int)CopyBits(w.w, kind) << 16);
  __stcs((uint2*)c + q, make_uint2(lo, hi));
}
// One chunk of n <= REPRISE_NORM_CHUNK elements. Where all four arrays are aligned (16 bytes,
// 8 for a 16-bit gradient), each thread loads two quads of each before it computes and stores
// either (eight vector loads in flight), with streaming hints: every byte is read and written
// once, and should not push out of L2 the gradients that are still to come. The rest goes
// element by element. Where `c` is not null, the updated weights' 16-bit copy (kind `copy_kind`)
// is written there too, so that no cast reads the weights again before the next forward.
template <typename G>
__device__ __forceinline__ void AdamChunk(const AdamStep& a, float* __restrict__ w,
                                          const G* __restrict__ g, float* __restrict__ m,
                                          float* __restrict__ v, unsigned short* __restrict__ c,
                                          int copy_kind, int n, bool aligned) {
  int done = 0;
  if (aligned) {
    const int quads = n / 4;
    done = 4 * quads;
    float4* __restrict__ w4 = (float4*)w;
    float4* __restrict__ m4 = (float4*)m;
    float4* __restrict__ v4 = (float4*)v;
    for (int q = threadIdx.x; q < quads; q += 2 * REPRISE_NORM_BLOCK) {
      const int r = q + REPRISE_NORM_BLOCK;
      const bool second = r < quads;
      float4 wa = __ldcs(w4 + q), ga = StreamGradQuad(g, q), ma = __ldcs(m4 + q),
             va = __ldcs(v4 + q);
      float4 wb = wa, gb = ga, mb = ma, vb = va;
      if (second) {
        wb = __ldcs(w4 + r);
        gb = StreamGradQuad(g, r);
        mb = __ldcs(m4 + r);
        vb = __ldcs(v4 + r);
      }
      AdamQuad(a, wa, ga, ma, va);
      __stcs(w4 + q, wa);
      __stcs(m4 + q, ma);
      __stcs(v4 + q, va);
      if (c != nullptr) StoreCopyQuad(c, q, wa, copy_kind);
      if (second) {
        AdamQuad(a, wb, gb, mb, vb);
        __stcs(w4 + r, wb);
        __stcs(m4 + r, mb);
        __stcs(v4 + r, vb);
        if (c != nullptr) StoreCopyQuad(c, r, wb, copy_kind);
      }
    }
  }
  for (int i = done + threadIdx.x; i < n; i += REPRISE_NORM_BLOCK) {
    float wi = w[i], mi = m[i], vi = v[i];
    AdamElement(a, wi, GradValue(g, i), mi, vi);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (c != nullptr) c[i] = CopyBits(wi, copy_kind);
  }
}
// Chunk `start` of tensor `t` (n elements of it), its gradient of the kind the table says (kind's
// bits 0-1) and its copy, where `c` is not null, of the kind in bits 2-3.
__device__ __forceinline__ void AdamTensorChunk(const AdamStep& a, float* __restrict__ w,
                                                const void* g, int kind, float* __restrict__ m,
                                                float* __restrict__ v, unsigned short* c,
                                                long long start, int n) {
  const bool aligned = Aligned16(w, m, v, v) && (((unsigned long long)c & 7ull) == 0ull);
  const int copy_kind = kind >> 2;
  unsigned short* const cs = c != nullptr ? c + start : nullptr;
  if ((kind & 3) == 1) {
    const Bf16Grad* gb = (const Bf16Grad*)g;
    AdamChunk(a, w + start, gb + start, m + start, v + start, cs, copy_kind, n,
              aligned && GradAligned(gb));
  } else if ((kind & 3) == 2) {
    const F16Grad* gh = (const F16Grad*)g;
    AdamChunk(a, w + start, gh + start, m + start, v + start, cs, copy_kind, n,
              aligned && GradAligned(gh));
  } else {
    const float* gf = (const float*)g;
    AdamChunk(a, w + start, gf + start, m + start, v + start, cs, copy_kind, n,
              aligned && GradAligned(gf));
  }
}
// A quad of a chunk of n as loaded (missing elements 0): float32's as LoadQuad gives it, a 16-bit
// gradient's four elements' bits packed in a uint2 (the template: Bf16Grad, F16Grad), widened by
// Widen as they are used.
__device__ __forceinline__ float4 RawQuad(const float* g, int q, int n, bool aligned) {
  return LoadQuad(g, q, n, aligned);
}
template <typename G16>
__device__ __forceinline__ uint2 RawQuad(const G16* g, int q, int n, bool aligned) {
  if (aligned && 4 * q + 4 <= n) return __ldg((const uint2*)g + q);
  unsigned int b[4] = {0u, 0u, 0u, 0u};
  for (int e = 0; e < 4; ++e) {
    if (4 * q + e < n) b[e] = g[4 * q + e].bits;
  }
  return make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
}
__device__ __forceinline__ float4 Widen(const float*, float4 r) { return r; }
__device__ __forceinline__ float4 Widen(const Bf16Grad*, uint2 u) {
  return make_float4(Bf16Value(u.x & 0xffffu), Bf16Value(u.x >> 16), Bf16Value(u.y & 0xffffu),
                     Bf16Value(u.y >> 16));
}
__device__ __forceinline__ float4 Widen(const F16Grad*, uint2 u) {
  return make_float4(F16Value(u.x & 0xffffu), F16Value(u.x >> 16), F16Value(u.y & 0xffffu),
                     F16Value(u.y >> 16));
}
// ChunkSumSquares of a chunk of n, by one warp, valid in lane 0: the block tree's order with no
// block barrier. Thread j of a kNormBlock-thread block summed the quads j, j + kNormBlock, ...;
// here lane l keeps those sums for the block's threads j = l + 32k (k < 8) in registers, adds
// them pairwise as the tree's levels 128, 64 and 32 do (k and k + 4, then k + 2, then k + 1: the
// same pairs), and the last five levels are shuffles pairing the same lanes. Each of the 32
// loads of a pass over k reads 32 consecutive quads across the warp.
template <typename G>
__device__ __forceinline__ float WarpChunkSumSquares(const G* __restrict__ g, int n, bool aligned,
                                                     float inv, int lane) {
  constexpr int kPerLane = REPRISE_NORM_BLOCK / 32;                   // Threads j per lane.
  constexpr int kQuads = REPRISE_NORM_CHUNK / REPRISE_NORM_BLOCK / 4;  // Quads per thread j.
  float acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.0f;
  // All of a pass's loads in flight before its first add: the whole chunk for 16-bit gradients
  // (kept as loaded, 2 registers a quad, widened as they are added), half of it for float32.
  constexpr int kPassQuads = sizeof(G) == 4 ? kQuads / 2 : kQuads;
#pragma unroll
  for (int m0 = 0; m0 < kQuads; m0 += kPassQuads) {
    decltype(RawQuad(g, 0, n, aligned)) x[kPassQuads][kPerLane];
#pragma unroll
    for (int m = 0; m < kPassQuads; ++m) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        x[m][k] = RawQuad(g, (m0 + m) * REPRISE_NORM_BLOCK + 32 * k + lane, n, aligned);
      }
    }
#pragma unroll
    for (int m = 0; m < kPassQuads; ++m) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int i = 4 * ((m0 + m) * REPRISE_NORM_BLOCK + 32 * k + lane);
        const float4 v = Widen(g, x[m][k]);
        acc[k] = AddSquare(acc[k], v.x, i, n, inv);
        acc[k] = AddSquare(acc[k], v.y, i + 1, n, inv);
        acc[k] = AddSquare(acc[k], v.z, i + 2, n, inv);
        acc[k] = AddSquare(acc[k], v.w, i + 3, n, inv);
      }
    }
  }
#pragma unroll
  for (int s = kPerLane / 2; s > 0; s /= 2) {
#pragma unroll
    for (int k = 0; k < s; ++k) acc[k] = __fadd_rn(acc[k], acc[k + s]);
  }
  float v = acc[0];
  for (int s = 16; s > 0; s /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, s));
  return v;
}
)");
}

// SgdMulti's walk over a chunk, after ChunkedHelpers (only its kernel carries it).
constexpr char kSgdChunk[] = R"(
// The SGD step's scalars, the same in every block.
struct SgdScalars {
  float rate, momentum, clip, inv;
  int nesterov;
};
// SgdElement over a quad: the same arithmetic, element by element, as every SGD kernel.
__device__ __forceinline__ void SgdQuad(const SgdScalars& s, float decay, float4& w,
                                        const float4& g, float4& v) {
  SgdElement(s.rate, s.momentum, decay, s.clip, s.inv, s.nesterov, w.x, g.x, v.x);
  SgdElement(s.rate, s.momentum, decay, s.clip, s.inv, s.nesterov, w.y, g.y, v.y);
  SgdElement(s.rate, s.momentum, decay, s.clip, s.inv, s.nesterov, w.z, g.z, v.z);
  SgdElement(s.rate, s.momentum, decay, s.clip, s.inv, s.nesterov, w.w, g.w, v.w);
}
// One chunk of n <= REPRISE_NORM_CHUNK elements of an SGD update, as AdamChunk walks one: two
// quads of each array in flight per thread where all are aligned, streaming hints, the rest
// element by element; the new weights' 16-bit copies where `c` is not null.
template <typename G>
__device__ __forceinline__ void SgdChunk(const SgdScalars& s, float decay, float* __restrict__ w,
                                         const G* __restrict__ g, float* __restrict__ v,
                                         unsigned short* __restrict__ c, int copy_kind, int n,
                                         bool aligned) {
  int done = 0;
  if (aligned) {
    const int quads = n / 4;
    done = 4 * quads;
    float4* __restrict__ w4 = (float4*)w;
    float4* __restrict__ v4 = (float4*)v;
    for (int q = threadIdx.x; q < quads; q += 2 * REPRISE_NORM_BLOCK) {
      const int r = q + REPRISE_NORM_BLOCK;
      const bool second = r < quads;
      float4 wa = __ldcs(w4 + q), ga = StreamGradQuad(g, q), va = __ldcs(v4 + q);
      float4 wb = wa, gb = ga, vb = va;
      if (second) {
        wb = __ldcs(w4 + r);
        gb = StreamGradQuad(g, r);
        vb = __ldcs(v4 + r);
      }
      SgdQuad(s, decay, wa, ga, va);
      __stcs(w4 + q, wa);
      __stcs(v4 + q, va);
      if (c != nullptr) StoreCopyQuad(c, q, wa, copy_kind);
      if (second) {
        SgdQuad(s, decay, wb, gb, vb);
        __stcs(w4 + r, wb);
        __stcs(v4 + r, vb);
        if (c != nullptr) StoreCopyQuad(c, r, wb, copy_kind);
      }
    }
  }
  for (int i = done + threadIdx.x; i < n; i += REPRISE_NORM_BLOCK) {
    float wi = w[i], vi = v[i];
    SgdElement(s.rate, s.momentum, decay, s.clip, s.inv, s.nesterov, wi, GradValue(g, i), vi);
    w[i] = wi;
    v[i] = vi;
    if (c != nullptr) c[i] = CopyBits(wi, copy_kind);
  }
}
)";

// SgdMulti's own check (REPRISE_CHECKS: the non-finite guard's check and verdict in the update's
// launch), after ChunkedHelpers. The kernel is launched cooperatively: every block is resident, so
// blocks may wait for each other on the barrier words.
constexpr char kSgdChecks[] = R"(
// Whether any of the n elements at g (a chunk, or the loss) is an inf or a NaN: every thread tests
// its quads, widened exactly (a widened inf or NaN stays one); missing elements read as 0.
template <typename G>
__device__ __forceinline__ int NotFiniteIn(const G* __restrict__ g, long long n, bool aligned) {
  int bad = 0;
  const long long quads = (n + 3) / 4;
#pragma unroll 4
  for (long long q = threadIdx.x; q < quads; q += REPRISE_NORM_BLOCK) {
    const int rest = (int)min(n - 4 * q, 4ll);
    const float4 x = LoadQuad(g + 4 * q, 0, rest, aligned);
    bad |= NotFiniteFloat(x.x) | NotFiniteFloat(x.y) | NotFiniteFloat(x.z) | NotFiniteFloat(x.w);
  }
  return bad;
}
__device__ __forceinline__ int NotFiniteOfKind(const void* g, int kind, long long n) {
  const bool aligned = ((unsigned long long)g & 15ull) == 0ull;
  if (kind == 1) return NotFiniteIn((const Bf16Grad*)g, n, aligned);
  if (kind == 2) return NotFiniteIn((const F16Grad*)g, n, aligned);
  return NotFiniteIn((const float*)g, n, aligned);
}
__device__ __forceinline__ unsigned LoadAcquireWord(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned AddReleaseWord(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;\n"
               : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// The guard's verdict before the update (loss_scale_check's with attr count, in this launch),
// once each block has tested, as `bad`, the chunks it updates after this (the same walk) and
// block 0 also the extra tensor (the loss). Every block arrives on words[0], a split grid barrier
// that is never reset (block 0 adds 2^31 - (blocks - 1), every other block 1, so bit 31 flips when
// the last arrives), having set words[1 + p] where it found a non-finite value, p being bit 31 as
// the launch started (`parity`, read then); block 0 clears the other parity's word, last read by
// the launch before. After the barrier every block reads the verdict (found, or under kStop a step
// found before: the record is read before the barrier and written by block 0 only after it);
// block 0 writes check = [1, found] and moves the counters on as loss_scale_check does. Returns,
// in every thread, whether to skip.
__device__ __forceinline__ bool CheckedStepSkips(int bad, unsigned parity, int* skipped_steps,
                                                 int* record, int sticky, unsigned* words,
                                                 float* check) {
  __shared__ int skip;
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    const int steps = record[0], first_found = record[1];
    if (blockIdx.x == 0) words[2 - parity] = 0u;
    if (bad) atomicOr(words + 1 + parity, 1u);
    const unsigned old = AddReleaseWord(words, blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u);
    while (((old ^ LoadAcquireWord(words)) & 0x80000000u) == 0u) {
    }
    const int found = LoadAcquireWord(words + 1 + parity) != 0u || (sticky && first_found != 0);
    if (blockIdx.x == 0) {
      check[0] = 1.0f;
      check[1] = found ? 1.0f : 0.0f;
      if (found) {
        skipped_steps[0] = skipped_steps[0] + 1;
        if (first_found == 0) record[1] = steps + 1;
      }
      record[0] = steps + 1;
    }
    skip = found;
  }
  __syncthreads();
  return skip != 0;
}
)";

}  // namespace

GeneratedKernel AdamMulti(int capacity, bool copies) {
  const std::string name = copies ? "reprise_adam_multi_copies" : "reprise_adam_multi";
  return {name,
          absl::StrCat(ChunkedHelpers(capacity), "#define REPRISE_COPIES ", copies ? 1 : 0,
                       R"(
struct AdamMultiTable {
  float* w[REPRISE_CAPACITY];
  const void* g[REPRISE_CAPACITY];
  float* m[REPRISE_CAPACITY];
  float* v[REPRISE_CAPACITY];
  const float* weight_decay[REPRISE_CAPACITY];
#if REPRISE_COPIES
  unsigned short* copy[REPRISE_CAPACITY];
#endif
  long long n[REPRISE_CAPACITY];
  int first[REPRISE_CAPACITY + 1];
};
extern "C" __global__ void __launch_bounds__(REPRISE_NORM_BLOCK, REPRISE_ADAM_BLOCKS_PER_SM)
)",
                       name,
                       R"((AdamMultiTable table, const __grid_constant__ GradKinds kinds, int count,
                   const float* __restrict__ lr, const int* __restrict__ step,
                   const float* __restrict__ beta1, const float* __restrict__ beta2,
                   const float* __restrict__ eps,
                   const float* __restrict__ clip, const float* __restrict__ partials,
                   long long partial_count, const float* __restrict__ max_norm,
                   const float* __restrict__ unscale, int decoupled, int scheduled,
                   long long warmup, int decay, long long total, double floor_factor,
                   long long step_size, double gamma
#if REPRISE_COPIES
                   , int* __restrict__ stale
#endif
) {
#if REPRISE_COPIES
  // The copies are current after this launch, whether it updates or skips: the refresh before it
  // made them so where they were stale (ops::RefreshCopiesOp).
  if (blockIdx.x == 0 && threadIdx.x == 0) *stale = 0;
#endif
  if (Skipped(unscale)) return;
  __shared__ double sums[REPRISE_NORM_BLOCK];
  __shared__ float block_clip;
  // The step's scalars: the same bits in every block, as the single-purpose kernels write them.
  const unsigned long long s = StepOf(step);
  const float rate = scheduled ? ScheduledRate(lr[0], s, warmup, decay, total, floor_factor,
                                               step_size, gamma)
                               : lr[0];
  float coefficient = clip != nullptr ? clip[0] : 1.0f;
  if (partials != nullptr) {
    const double sum = SumPartials(partials, partial_count, sums);
    if (threadIdx.x == 0) block_clip = ClipOfSum(sum, max_norm[0]);
    __syncthreads();
    coefficient = block_clip;
  }
  int t = count - 1;
  AdamStep a = MakeAdamStep(rate, s, beta1[0], beta2[0], eps[0], table.weight_decay[t][0],
                            coefficient, InverseScale(unscale), decoupled);
  for (int c = table.first[count] - 1 - (int)blockIdx.x; c >= 0; c -= (int)gridDim.x) {
    if (c < table.first[t]) {
      do --t;
      while (c < table.first[t]);
      SetWeightDecay(a, rate, table.weight_decay[t][0], decoupled);
    }
    const long long start = (long long)(c - table.first[t]) * REPRISE_NORM_CHUNK;
    const int n = (int)min((long long)REPRISE_NORM_CHUNK, table.n[t] - start);
#if REPRISE_COPIES
    unsigned short* const copy = table.copy[t];
#else
    unsigned short* const copy = nullptr;
#endif
    AdamTensorChunk(a, table.w[t], table.g[t], kinds.kind[t], table.m[t], table.v[t], copy, start,
                    n);
  }
}
)")};
}

GeneratedKernel SgdMulti(int capacity, bool copies, bool checks) {
  const std::string name =
      absl::StrCat("reprise_sgd_multi", checks ? "_checked" : "", copies ? "_copies" : "");
  return {name,
          absl::StrCat(ChunkedHelpers(capacity), kSgdChunk, checks ? kSgdChecks : "",
                       "#define REPRISE_CHECKS ", checks ? 1 : 0, "\n#define REPRISE_COPIES ",
                       copies ? 1 : 0, R"(
struct SgdMultiTable {
  float* w[REPRISE_CAPACITY];
  const void* g[REPRISE_CAPACITY];
  float* v[REPRISE_CAPACITY];
  const float* weight_decay[REPRISE_CAPACITY];
#if REPRISE_COPIES
  unsigned short* copy[REPRISE_CAPACITY];
#endif
  long long n[REPRISE_CAPACITY];
  int first[REPRISE_CAPACITY + 1];
};
extern "C" __global__ void __launch_bounds__(REPRISE_NORM_BLOCK, REPRISE_ADAM_BLOCKS_PER_SM)
)",
                       name,
                       R"((SgdMultiTable table, const __grid_constant__ GradKinds kinds, int count,
                   const float* __restrict__ lr, const float* __restrict__ mu,
                   const float* __restrict__ clip, const float* __restrict__ unscale, int nesterov
#if REPRISE_COPIES
                   , int* __restrict__ stale
#endif
#if REPRISE_CHECKS
                   , const void* __restrict__ extra, long long extra_n, int extra_kind,
                   int* __restrict__ skipped_steps, int* __restrict__ record, int sticky,
                   unsigned* __restrict__ words, float* __restrict__ check
#endif
) {
#if REPRISE_COPIES
  // As adam_multi's: the copies are current after this launch, whether it updates or skips.
  if (blockIdx.x == 0 && threadIdx.x == 0) *stale = 0;
#endif
#if REPRISE_CHECKS
  {
    // Thread 0's, read before its block arrives, so before the barrier can flip it.
    const unsigned parity = threadIdx.x == 0 ? LoadAcquireWord(words) >> 31 : 0u;
    int bad = 0, t = count - 1;
    for (int c = table.first[count] - 1 - (int)blockIdx.x; c >= 0; c -= (int)gridDim.x) {
      while (c < table.first[t]) --t;
      const long long start = (long long)(c - table.first[t]) * REPRISE_NORM_CHUNK;
      const int kind = kinds.kind[t] & 3;
      const char* base = (const char*)table.g[t] + start * (kind == 0 ? 4 : 2);
      bad |= NotFiniteOfKind(base, kind, min((long long)REPRISE_NORM_CHUNK, table.n[t] - start));
    }
    if (blockIdx.x == 0 && extra != nullptr) bad |= NotFiniteOfKind(extra, extra_kind, extra_n);
    if (CheckedStepSkips(bad, parity, skipped_steps, record, sticky, words, check)) return;
  }
#else
  if (Skipped(unscale)) return;
#endif
  const SgdScalars s{lr[0], mu[0], clip != nullptr ? clip[0] : 1.0f, InverseScale(unscale),
                     nesterov};
  int t = count - 1;
  float decay = table.weight_decay[t][0];
  // From the last chunk to the first, as AdamMulti: the gradients made last may still be in L2.
  for (int c = table.first[count] - 1 - (int)blockIdx.x; c >= 0; c -= (int)gridDim.x) {
    if (c < table.first[t]) {
      do --t;
      while (c < table.first[t]);
      decay = table.weight_decay[t][0];
    }
    const long long start = (long long)(c - table.first[t]) * REPRISE_NORM_CHUNK;
    const int n = (int)min((long long)REPRISE_NORM_CHUNK, table.n[t] - start);
    const int kind = kinds.kind[t];
#if REPRISE_COPIES
    unsigned short* const copy = table.copy[t] != nullptr ? table.copy[t] + start : nullptr;
#else
    unsigned short* const copy = nullptr;
#endif
    float* const w = table.w[t] + start;
    float* const v = table.v[t] + start;
    const bool aligned = Aligned16(w, v, v, v) && (((unsigned long long)copy & 7ull) == 0ull);
    if ((kind & 3) == 1) {
      const Bf16Grad* g = (const Bf16Grad*)table.g[t];
      SgdChunk(s, decay, w, g + start, v, copy, kind >> 2, n, aligned && GradAligned(g));
    } else if ((kind & 3) == 2) {
      const F16Grad* g = (const F16Grad*)table.g[t];
      SgdChunk(s, decay, w, g + start, v, copy, kind >> 2, n, aligned && GradAligned(g));
    } else {
      const float* g = (const float*)table.g[t];
      SgdChunk(s, decay, w, g + start, v, copy, kind >> 2, n, aligned && GradAligned(g));
    }
  }
}
)")};
}

GeneratedKernel GradSumSquares(int capacity) {
  return {"reprise_grad_sum_squares",
          absl::StrCat(ChunkedHelpers(capacity), "#define REPRISE_SUM_SQUARES_BLOCKS_PER_SM ",
                       kSumSquaresBlocksPerSm, R"(
struct NormTable {
  const void* g[REPRISE_CAPACITY];
  long long n[REPRISE_CAPACITY];
  int first[REPRISE_CAPACITY + 1];
};
extern "C" __global__ void __launch_bounds__(REPRISE_NORM_BLOCK, REPRISE_SUM_SQUARES_BLOCKS_PER_SM)
reprise_grad_sum_squares(NormTable table, const __grid_constant__ GradKinds kinds, int count,
                         float* __restrict__ partials, long long first_partial,
                         const float* __restrict__ unscale, float* __restrict__ flags,
                         long long partial_count) {
  // A warp a chunk, the warps of the grid striding over the chunks: no block barrier, so one
  // warp's loads are in flight while another adds.
  constexpr int kWarps = REPRISE_NORM_BLOCK / 32;
  const int lane = (int)threadIdx.x % 32;
  const float inv = InverseScale(unscale);
  int t = 0;
  for (int c = (int)blockIdx.x * kWarps + (int)threadIdx.x / 32; c < table.first[count];
       c += (int)gridDim.x * kWarps) {
    while (c >= table.first[t + 1]) ++t;
    const long long start = (long long)(c - table.first[t]) * REPRISE_NORM_CHUNK;
    const int n = (int)min((long long)REPRISE_NORM_CHUNK, table.n[t] - start);
    const int kind = kinds.kind[t];
    float total;
    if (kind == 1) {
      const Bf16Grad* g = (const Bf16Grad*)table.g[t];
      total = WarpChunkSumSquares(g + start, n, GradAligned(g), inv, lane);
    } else if (kind == 2) {
      const F16Grad* g = (const F16Grad*)table.g[t];
      total = WarpChunkSumSquares(g + start, n, GradAligned(g), inv, lane);
    } else {
      const float* g = (const float*)table.g[t];
      total = WarpChunkSumSquares(g + start, n, GradAligned(g), inv, lane);
    }
    const long long at = first_partial + c;
    if (lane == 0 && at < partial_count) partials[at] = total;
    if (flags == nullptr) continue;
    // The non-finite flag of the chunk: a finite sum of squares has only finite terms; a sum that
    // is not finite is read again element by element, since a finite value past ~1.8e19 overflows
    // its square.
    if (NotFiniteFloat(__shfl_sync(0xffffffffu, total, 0))) {
      int bad = 0;
      for (int i = lane; i < n; i += 32) {
        const long long e = start + i;
        const float x = kind == 1   ? GradValue((const Bf16Grad*)table.g[t], e)
                        : kind == 2 ? GradValue((const F16Grad*)table.g[t], e)
                                    : ((const float*)table.g[t])[e];
        bad |= NotFiniteFloat(x);
      }
      bad = __any_sync(0xffffffffu, bad);
      if (lane == 0) flags[at] = bad ? 1.0f : 0.0f;
    } else if (lane == 0) {
      flags[at] = 0.0f;
    }
  }
}
)")};
}

}  // namespace reprise::codegen
