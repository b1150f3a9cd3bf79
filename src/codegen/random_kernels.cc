#include "src/codegen/random_kernels.h"

namespace reprise::codegen {

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k = {k[0] + 0x9E3779B9u, k[1] + 0xBB67AE85u};
  }
  return c;
}

bool DropoutDrops(uint64_t index, uint64_t step, uint32_t key_lo, uint32_t key_hi,
                  uint32_t threshold) {
  const std::array<uint32_t, 4> out =
      Philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                  static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
                 {key_lo, key_hi});
  return (out[0] >> 8) < threshold;
}

GeneratedKernel Dropout() {
  return {"reprise_dropout", R"(
__device__ unsigned PhiloxFirstWord(unsigned c0, unsigned c1, unsigned c2, unsigned c3,
                                    unsigned k0, unsigned k1) {
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0;
    const unsigned long long p1 = 0xCD9E8D57ull * c2;
    const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0;
    const unsigned n1 = (unsigned)p1;
    const unsigned n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    const unsigned n3 = (unsigned)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

extern "C" __global__ void reprise_dropout(const float* __restrict__ x, const int* __restrict__ step,
                                           float* __restrict__ y, long long n, unsigned key_lo,
                                           unsigned key_hi, unsigned threshold, float scale) {
  const unsigned s_lo = (unsigned)step[0], s_hi = (unsigned)step[1];
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned u = PhiloxFirstWord((unsigned)i, (unsigned)((unsigned long long)i >> 32), s_lo,
                                       s_hi, key_lo, key_hi);
    y[i] = (u >> 8) < threshold ? 0.0f : __fmul_rn(x[i], scale);
  }
}
)"};
}

GeneratedKernel AdvanceStep() {
  return {"reprise_advance_step", R"(
extern "C" __global__ void reprise_advance_step(int* step, const float* check) {
  if (check != nullptr && check[1] != 0.0f) return;
  const unsigned lo = (unsigned)step[0] + 1u;
  step[0] = (int)lo;
  if (lo == 0u) step[1] = (int)((unsigned)step[1] + 1u);
}
)"};
}

}  // namespace reprise::codegen
