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

GeneratedKernel GradNonfinite() {
  return {"reprise_grad_nonfinite",
          Defines() + absl::StrCat("#define REPRISE_NONFINITE_TABLE ", kNonfiniteTableSize, "\n") +
              R"(
struct NonfiniteTable {
  const void* g[REPRISE_NONFINITE_TABLE];
  long long n[REPRISE_NONFINITE_TABLE];
  int first[REPRISE_NONFINITE_TABLE];
  int kind[REPRISE_NONFINITE_TABLE];  // 0 float32, 1 bfloat16, 2 float16.
};
// A 16-bit float is not finite when its exponent bits are all set.
__device__ __forceinline__ int NotFinite16(unsigned short x, unsigned exponent) {
  return (x & exponent) == exponent;
}
extern "C" __global__ void reprise_grad_nonfinite(NonfiniteTable table,
                                                  float* __restrict__ flags) {
  const int t = blockIdx.y;
  const long long n = table.n[t];
  const long long start = (long long)blockIdx.x * REPRISE_NORM_CHUNK;
  if (start >= n) return;  // The whole block leaves together.
  const long long count = n - start;
  int bad = 0;
  if (table.kind[t] != 0) {
    // Checked before their widening cast, in the dtype the backward made them.
    const unsigned short* __restrict__ g = (const unsigned short*)table.g[t] + start;
    const unsigned exponent = table.kind[t] == 2 ? 0x7c00u : 0x7f80u;
    for (int k = 0; k < REPRISE_NORM_CHUNK / REPRISE_NORM_BLOCK; ++k) {
      const long long i = (long long)k * REPRISE_NORM_BLOCK + threadIdx.x;
      if (i < count) bad |= NotFinite16(g[i], exponent);
    }
  } else {
    const float* __restrict__ g = (const float*)table.g[t] + start;
    for (int k = 0; k < REPRISE_NORM_CHUNK / REPRISE_NORM_BLOCK; ++k) {
      const long long i = (long long)k * REPRISE_NORM_BLOCK + threadIdx.x;
      if (i < count) bad |= NotFinite(g[i]);
    }
  }
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) flags[table.first[t] + blockIdx.x] = bad ? 1.0f : 0.0f;
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
  int found = 0;
  for (long long p = threadIdx.x; p < count; p += REPRISE_NORM_BLOCK) found |= flags[p] != 0.0f;
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
  return {GradNonfinite(), LossScaleCheck(), LossScaleUpdate()};
}

}  // namespace reprise::codegen
