#include "src/codegen/loss_scale_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"

namespace reprise::codegen {
namespace {

// A float is not finite when its exponent bits are all set (inf or NaN): no math header needed.
std::string Defines() {
  return absl::StrCat("#define REPRISE_TABLE ", kOptimizerTableSize,
                      "\n#define REPRISE_NORM_BLOCK ", kNormBlock, "\n#define REPRISE_NORM_CHUNK ",
                      kNormChunk, R"(
__device__ __forceinline__ int NotFinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}
)");
}

}  // namespace

GeneratedKernel GradNonfinite(int capacity) {
  return {"reprise_grad_nonfinite",
          Defines() +
              absl::StrCat("#define REPRISE_CAPACITY ", capacity,
                           "\n#define REPRISE_NORM_BLOCKS_PER_SM ", kNormBlocksPerSm, "\n") +
              R"(
struct NonfiniteTable {  // As the chunked optimizer kernels' tables (src/ops/multi_tensor.h).
  const void* g[REPRISE_CAPACITY];
  long long n[REPRISE_CAPACITY];
  int first[REPRISE_CAPACITY + 1];
};
struct NonfiniteKinds {
  unsigned char kind[REPRISE_CAPACITY];  // 0 float32, 1 bfloat16, 2 float16.
};
// Whether any of the two 16-bit floats in `w` has all its exponent bits set.
__device__ __forceinline__ int NotFinite16Pair(unsigned w, unsigned exponent) {
  return ((w & exponent) == exponent) | (((w >> 16) & exponent) == exponent);
}
__device__ __forceinline__ int NotFiniteWord(unsigned w, int kind, unsigned exponent) {
  return kind == 0 ? NotFinite(__uint_as_float(w)) : NotFinite16Pair(w, exponent);
}
// Blocks stride over the chunks of every tensor of the table. A whole, 16-byte aligned chunk is
// read with 16-byte loads, all issued before any is tested (bandwidth-bound: the check used to be
// one 2-byte load per thread and a block per (chunk, tensor) pair, most of them idle); a tensor's
// short last chunk and unaligned tensors go element by element.
extern "C" __global__ void __launch_bounds__(REPRISE_NORM_BLOCK, REPRISE_NORM_BLOCKS_PER_SM)
reprise_grad_nonfinite(NonfiniteTable table, NonfiniteKinds kinds, int count,
                       float* __restrict__ flags, long long first_flag) {
  constexpr int kVectors = REPRISE_NORM_CHUNK * 4 / 16 / REPRISE_NORM_BLOCK;  // float32, per thread.
  int t = 0;
  for (int c = blockIdx.x; c < table.first[count]; c += gridDim.x) {
    while (c >= table.first[t + 1]) ++t;
    const int kind = kinds.kind[t];
    const int bytes = kind == 0 ? 4 : 2;
    const unsigned exponent = kind == 2 ? 0x7c00u : 0x7f80u;
    const long long start = (long long)(c - table.first[t]) * REPRISE_NORM_CHUNK;
    const int n = (int)min((long long)REPRISE_NORM_CHUNK, table.n[t] - start);
    const char* __restrict__ base = (const char*)table.g[t] + start * bytes;
    int bad = 0;
    if (n == REPRISE_NORM_CHUNK && ((unsigned long long)base & 15ull) == 0ull) {
      const uint4* __restrict__ v = (const uint4*)base;
      const int vectors = REPRISE_NORM_CHUNK * bytes / 16;
      uint4 x[kVectors];
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
        const int q = k * REPRISE_NORM_BLOCK + (int)threadIdx.x;
        x[k] = q < vectors ? v[q] : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
        bad |= NotFiniteWord(x[k].x, kind, exponent) | NotFiniteWord(x[k].y, kind, exponent) |
               NotFiniteWord(x[k].z, kind, exponent) | NotFiniteWord(x[k].w, kind, exponent);
      }
    } else if (kind != 0) {  // Checked before their widening cast, in the backward's dtype.
      const unsigned short* __restrict__ g = (const unsigned short*)base;
      for (int i = threadIdx.x; i < n; i += REPRISE_NORM_BLOCK) {
        bad |= (g[i] & exponent) == exponent;
      }
    } else {
      const float* __restrict__ g = (const float*)base;
      for (int i = threadIdx.x; i < n; i += REPRISE_NORM_BLOCK) bad |= NotFinite(g[i]);
    }
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) flags[first_flag + c] = bad ? 1.0f : 0.0f;
  }
}
)"};
}

GeneratedKernel LossScaleCheck() {
  return {"reprise_loss_scale_check", Defines() + R"(
extern "C" __global__ void reprise_loss_scale_check(const float* __restrict__ flags,
                                                    long long count,
                                                    const float* __restrict__ scale,
                                                    int* __restrict__ record, int sticky,
                                                    int* __restrict__ skipped_steps,
                                                    float* __restrict__ check) {
  // Sixteen loads in flight before their tests (the flags are in L2: latency, not bandwidth).
  constexpr int kBatch = 16;
  int found = 0;
  for (long long base = threadIdx.x; base < count; base += kBatch * REPRISE_NORM_BLOCK) {
    float f[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const long long p = base + (long long)k * REPRISE_NORM_BLOCK;
      f[k] = p < count ? flags[p] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) found |= f[k] != 0.0f;
  }
  found = __syncthreads_or(found);
  if (threadIdx.x == 0) {
    found = found || (sticky && record[1] != 0);
    check[0] = scale != nullptr ? (float)(1.0 / (double)scale[0]) : 1.0f;
    check[1] = found ? 1.0f : 0.0f;
    if (skipped_steps != nullptr) {  // The guard's counters.
      const int steps = record[0];
      if (found) {
        skipped_steps[0] = skipped_steps[0] + 1;
        if (record[1] == 0) record[1] = steps + 1;
      }
      record[0] = steps + 1;
    }
  }
}
)"};
}

GeneratedKernel LossScaleUpdate() {
  return {"reprise_loss_scale_update", Defines() + R"(
extern "C" __global__ void reprise_loss_scale_update(float* __restrict__ scale,
                                                     int* __restrict__ growth_tracker,
                                                     int* __restrict__ skipped_steps,
                                                     const float* __restrict__ check,
                                                     float growth, float backoff,
                                                     long long interval) {
  if (check[1] != 0.0f) {
    scale[0] = __fmul_rn(scale[0], backoff);
    growth_tracker[0] = 0;
    skipped_steps[0] = skipped_steps[0] + 1;
    return;
  }
  const long long clean = (long long)growth_tracker[0] + 1;
  if (clean >= interval) {
    const float grown = __fmul_rn(scale[0], growth);
    if (!NotFinite(grown)) scale[0] = grown;
    growth_tracker[0] = 0;
  } else {
    growth_tracker[0] = (int)clean;
  }
}
)"};
}

std::vector<GeneratedKernel> LossScaleKernels() {
  return {GradNonfinite(32), LossScaleCheck(), LossScaleUpdate()};
}

}  // namespace reprise::codegen
