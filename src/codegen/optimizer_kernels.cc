#include "src/codegen/optimizer_kernels.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/gradient_loads.h"

namespace reprise::codegen {
namespace {

constexpr double kPi = 3.141592653589793;

}  // namespace

// Device twins of the host functions below, operation for operation. Products that feed a sum
// are rounded explicitly (__dmul_rn, __fmul_rn): NVRTC would otherwise contract them into FMAs,
// which the host does not use.
std::string OptimizerHelpers() {
  return absl::StrCat(GradientLoads(), "#define REPRISE_TABLE ", kOptimizerTableSize,
                      "\n#define REPRISE_NORM_BLOCK ", kNormBlock, "\n#define REPRISE_NORM_CHUNK ",
                      kNormChunk, "\n#define REPRISE_NORM_BLOCKS_PER_SM ", kNormBlocksPerSm,
                      "\n#define REPRISE_ADAM_BLOCKS_PER_SM ", kAdamBlocksPerSm, R"(
__device__ unsigned long long StepOf(const int* step) {
  return (unsigned long long)(unsigned)step[0] | ((unsigned long long)(unsigned)step[1] << 32);
}
__device__ double PowInt(double base, unsigned long long e) {
  double result = 1.0;
  while (e != 0ull) {
    if (e & 1ull) result = __dmul_rn(result, base);
    base = __dmul_rn(base, base);
    e >>= 1;
  }
  return result;
}
__device__ float OneMinus(float b) { return (float)(1.0 - (double)b); }
__device__ double LrFactor(unsigned long long s, long long warmup, int decay, long long total,
                           double floor_factor, long long step_size, double gamma) {
  if (s < (unsigned long long)warmup) return (double)(s + 1ull) / (double)warmup;
  const unsigned long long d = s - (unsigned long long)warmup;
  if (decay == 1) {
    const unsigned long long span = (unsigned long long)total - (unsigned long long)warmup;
    const double progress = d >= span ? 1.0 : (double)d / (double)span;
    const double half = __dmul_rn(0.5, 1.0 + cos(__dmul_rn(3.141592653589793, progress)));
    return __dadd_rn(floor_factor, __dmul_rn(1.0 - floor_factor, half));
  }
  if (decay == 2) return PowInt(gamma, d / (unsigned long long)step_size);
  return 1.0;
}
// The rate LrSchedule writes: rounded to float once, after the product in double.
__device__ float ScheduledRate(float lr, unsigned long long s, long long warmup, int decay,
                               long long total, double floor_factor, long long step_size,
                               double gamma) {
  return (float)((double)lr * LrFactor(s, warmup, decay, total, floor_factor, step_size, gamma));
}
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
// The host's tree over a block of REPRISE_NORM_BLOCK threads' values (lane j adds lane j + s, for
// s = REPRISE_NORM_BLOCK / 2, ..., 1): down to 32 lanes in shared memory (`smem`, one value per
// thread), the last five levels as shuffles in warp 0, pairing the same lanes. The sum is valid in
// thread 0. Safe to call again at once: no thread writes a lane that another may still read.
template <typename T>
__device__ T BlockTreeSum(T v, T* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = REPRISE_NORM_BLOCK / 2; s >= 32; s /= 2) {
    if (threadIdx.x < s) smem[threadIdx.x] = Add(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    v = smem[threadIdx.x];
    for (int s = 16; s > 0; s /= 2) v = Add(v, __shfl_down_sync(0xffffffffu, v, s));
  }
  return v;
}
// Σ partials (SumPartials on the host), valid in thread 0: lane j adds partials j, j + 256, ...
// in double, then the tree. Sixteen loads in flight before their adds: every block of adam_multi
// starts with this (ResNet-50 has 6,400 partial sums). `smem` holds REPRISE_NORM_BLOCK doubles.
__device__ double SumPartials(const float* __restrict__ partials, long long count, double* smem) {
  constexpr int kBatch = 16;
  double acc = 0.0;
  for (long long base = threadIdx.x; base < count; base += kBatch * REPRISE_NORM_BLOCK) {
    float x[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const long long p = base + (long long)k * REPRISE_NORM_BLOCK;
      x[k] = p < count ? partials[p] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (base + (long long)k * REPRISE_NORM_BLOCK < count) acc = __dadd_rn(acc, (double)x[k]);
    }
  }
  return BlockTreeSum(acc, smem);
}
// ClipCoefficient(sqrt(sum), max_norm), rounded to float; NaN stays NaN.
__device__ float ClipOfSum(double sum, float max_norm) {
  const double c = (double)max_norm / (sqrt(sum) + 1e-6);
  return (float)(c > 1.0 ? 1.0 : c);
}
// Loss scaling's check (src/codegen/loss_scale_kernels.h): [1 / scale, found non-finite]. Null
// when the step is not loss-scaled.
__device__ __forceinline__ bool Skipped(const float* unscale) {
  return unscale != nullptr && unscale[1] != 0.0f;
}
__device__ __forceinline__ float InverseScale(const float* unscale) {
  return unscale != nullptr ? unscale[0] : 1.0f;
}
struct AdamStep {
  float step_size, bc2_sqrt, decay, wd_l2, b1, omb1, b2, omb2, eps, clip, inv;
};
// The weight-decay part of the step's scalars, per tensor in the multi-tensor kernel.
__device__ void SetWeightDecay(AdamStep& a, float lr, float wd, int decoupled) {
  a.decay = decoupled ? (float)(1.0 - __dmul_rn((double)lr, (double)wd)) : 1.0f;
  a.wd_l2 = decoupled ? 0.0f : wd;
}
__device__ AdamStep MakeAdamStep(float lr, unsigned long long step, float beta1, float beta2,
                                 float eps, float wd, float clip, float inv, int decoupled) {
  AdamStep a;
  const unsigned long long t = step + 1ull;
  const double rate = lr;
  a.step_size = (float)(rate / (1.0 - PowInt(beta1, t)));
  a.bc2_sqrt = (float)sqrt(1.0 - PowInt(beta2, t));
  SetWeightDecay(a, lr, wd, decoupled);
  a.b1 = beta1;
  a.omb1 = OneMinus(a.b1);
  a.b2 = beta2;
  a.omb2 = OneMinus(a.b2);
  a.eps = eps;
  a.clip = clip;
  a.inv = inv;
  return a;
}
// Unscaled first, then clipped: GradScaler.unscale_ before clip_grad_norm_.
__device__ void AdamElement(const AdamStep& a, float& w, float grad, float& m, float& v) {
  float g = __fmul_rn(a.clip, __fmul_rn(a.inv, grad));
  if (a.wd_l2 != 0.0f) g = __fadd_rn(g, __fmul_rn(a.wd_l2, w));
  const float decayed = __fmul_rn(w, a.decay);
  const float mm = __fadd_rn(__fmul_rn(a.b1, m), __fmul_rn(a.omb1, g));
  const float vv = __fadd_rn(__fmul_rn(a.b2, v), __fmul_rn(a.omb2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), a.bc2_sqrt), a.eps);
  m = mm;
  v = vv;
  w = __fsub_rn(decayed, __fmul_rn(a.step_size, __fdiv_rn(mm, denom)));
}
__device__ void SgdElement(float lr, float mu, float wd, float clip, float inv, int nesterov,
                           float& w, float grad, float& v) {
  const float g = __fadd_rn(__fmul_rn(clip, __fmul_rn(inv, grad)), __fmul_rn(wd, w));
  const float vel = __fadd_rn(__fmul_rn(mu, v), g);
  v = vel;
  const float dir = nesterov ? __fadd_rn(g, __fmul_rn(mu, vel)) : vel;
  w = __fsub_rn(w, __fmul_rn(lr, dir));
}
// The grid-stride loops over one tensor, shared by the single and multi-tensor kernels. Where
// every array is 16-byte aligned, each thread takes four elements with one 16-byte load or store
// per array (bandwidth: ~77% of a device copy with scalar accesses on an H100); the arithmetic of
// each element is the same, so are the bits. The tail (n % 4) and unaligned tensors go one by one.
__device__ __forceinline__ bool Aligned16(const void* a, const void* b, const void* c,
                                          const void* d) {
  return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c |
           (unsigned long long)d) & 15ull) == 0ull;
}
__device__ __forceinline__ long long ThreadIndex() {
  return blockIdx.x * (long long)blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long GridThreads() { return (long long)gridDim.x * blockDim.x; }
__device__ __forceinline__ void AdamRange(const AdamStep& a, float* __restrict__ w,
                                          const float* __restrict__ g, float* __restrict__ m,
                                          float* __restrict__ v, long long n) {
  long long done = 0;
  if (Aligned16(w, g, m, v)) {
    done = n / 4 * 4;
    for (long long q = ThreadIndex(); q < n / 4; q += GridThreads()) {
      float4 w4 = ((float4*)w)[q], m4 = ((float4*)m)[q], v4 = ((float4*)v)[q];
      const float4 g4 = ((const float4*)g)[q];
      AdamElement(a, w4.x, g4.x, m4.x, v4.x);
      AdamElement(a, w4.y, g4.y, m4.y, v4.y);
      AdamElement(a, w4.z, g4.z, m4.z, v4.z);
      AdamElement(a, w4.w, g4.w, m4.w, v4.w);
      ((float4*)w)[q] = w4;
      ((float4*)m)[q] = m4;
      ((float4*)v)[q] = v4;
    }
  }
  for (long long i = done + ThreadIndex(); i < n; i += GridThreads()) {
    float wi = w[i], mi = m[i], vi = v[i];
    AdamElement(a, wi, g[i], mi, vi);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
  }
}
template <typename G>
__device__ __forceinline__ void SgdRange(const float* lr, const float* mu, const float* wd,
                                         const float* clip, const float* unscale, int nesterov,
                                         float* __restrict__ w, const G* __restrict__ g,
                                         float* __restrict__ v, long long n) {
  if (Skipped(unscale)) return;
  const float rate = lr[0], momentum = mu[0], decay = wd[0];
  const float scale = clip != nullptr ? clip[0] : 1.0f, inv = InverseScale(unscale);
  long long done = 0;
  if (Aligned16(w, v, v, v) && GradAligned(g)) {
    done = n / 4 * 4;
    for (long long q = ThreadIndex(); q < n / 4; q += GridThreads()) {
      float4 w4 = ((float4*)w)[q], v4 = ((float4*)v)[q];
      const float4 g4 = GradQuad(g, q);
      SgdElement(rate, momentum, decay, scale, inv, nesterov, w4.x, g4.x, v4.x);
      SgdElement(rate, momentum, decay, scale, inv, nesterov, w4.y, g4.y, v4.y);
      SgdElement(rate, momentum, decay, scale, inv, nesterov, w4.z, g4.z, v4.z);
      SgdElement(rate, momentum, decay, scale, inv, nesterov, w4.w, g4.w, v4.w);
      ((float4*)w)[q] = w4;
      ((float4*)v)[q] = v4;
    }
  }
  for (long long i = done + ThreadIndex(); i < n; i += GridThreads()) {
    float wi = w[i], vi = v[i];
    SgdElement(rate, momentum, decay, scale, inv, nesterov, wi, GradValue(g, i), vi);
    w[i] = wi;
    v[i] = vi;
  }
}
)");
}

double PowInt(double base, uint64_t exponent) {
  double result = 1.0;
  while (exponent != 0) {
    if (exponent & 1) result *= base;
    base *= base;
    exponent >>= 1;
  }
  return result;
}

double LrFactor(const ScheduleParams& p, uint64_t step) {
  const uint64_t warmup = static_cast<uint64_t>(p.warmup_steps);
  if (step < warmup) return static_cast<double>(step + 1) / static_cast<double>(warmup);
  const uint64_t d = step - warmup;
  switch (p.decay) {
    case ScheduleDecay::kCosine: {
      const uint64_t span = static_cast<uint64_t>(p.total_steps) - warmup;
      const double progress = d >= span ? 1.0 : static_cast<double>(d) / static_cast<double>(span);
      const double half = 0.5 * (1.0 + std::cos(kPi * progress));
      const double scaled = (1.0 - p.min_factor) * half;
      return p.min_factor + scaled;
    }
    case ScheduleDecay::kStep:
      return PowInt(p.gamma, d / static_cast<uint64_t>(p.step_size));
    case ScheduleDecay::kConstant:
      break;
  }
  return 1.0;
}

AdamStep AdamStepOf(double lr, double beta1, double beta2, double weight_decay, bool decoupled,
                    uint64_t step) {
  const uint64_t t = step + 1;
  AdamStep a;
  a.step_size = lr / (1.0 - PowInt(beta1, t));
  a.bc2_sqrt = std::sqrt(1.0 - PowInt(beta2, t));
  const double product = lr * weight_decay;
  a.decay = decoupled ? 1.0 - product : 1.0;
  return a;
}

double ClipCoefficient(double norm, double max_norm) {
  const double c = max_norm / (norm + 1e-6);
  return c > 1.0 ? 1.0 : c;
}

int MultiTensorCapacity(int64_t tensors) {
  int capacity = 32;
  while (capacity < tensors && capacity < kMaxMultiTensorCapacity) capacity *= 2;
  return capacity;
}

GeneratedKernel LrSchedule() {
  return {"reprise_lr_schedule", OptimizerHelpers() + R"(
extern "C" __global__ void reprise_lr_schedule(const float* __restrict__ lr,
                                               const int* __restrict__ step,
                                               float* __restrict__ out, long long warmup,
                                               int decay, long long total, double floor_factor,
                                               long long step_size, double gamma) {
  out[0] = ScheduledRate(lr[0], StepOf(step), warmup, decay, total, floor_factor, step_size, gamma);
}
)"};
}

GeneratedKernel SgdUpdate() {
  return {"reprise_sgd_update", OptimizerHelpers() + R"(
extern "C" __global__ void reprise_sgd_update(float* __restrict__ w, const float* __restrict__ g,
                                              float* __restrict__ v, const float* __restrict__ lr,
                                              const float* __restrict__ mu,
                                              const float* __restrict__ wd,
                                              const float* __restrict__ clip,
                                              const float* __restrict__ unscale, int nesterov,
                                              long long n) {
  SgdRange(lr, mu, wd, clip, unscale, nesterov, w, g, v, n);
}
)"};
}

GeneratedKernel SgdUpdateMulti(DType gradient) {
  const std::string name = ElementKernelName("reprise_sgd_update_multi", gradient);
  return {name,
          absl::StrCat(OptimizerHelpers(), "typedef ", GradientType(gradient), " grad_t;\n", R"(
struct SgdTable {
  float* w[REPRISE_TABLE];
  const grad_t* g[REPRISE_TABLE];
  float* v[REPRISE_TABLE];
  long long n[REPRISE_TABLE];
};
extern "C" __global__ void )",
                       name, R"((SgdTable table, const float* __restrict__ lr,
                                      const float* __restrict__ mu, const float* __restrict__ wd,
                                      const float* __restrict__ clip,
                                      const float* __restrict__ unscale, int nesterov) {
  const int t = blockIdx.y;
  float* __restrict__ w = table.w[t];
  const grad_t* __restrict__ g = table.g[t];
  float* __restrict__ v = table.v[t];
  const long long n = table.n[t];
  SgdRange(lr, mu, wd, clip, unscale, nesterov, w, g, v, n);
}
)")};
}

GeneratedKernel Adam() {
  return {"reprise_adam", OptimizerHelpers() + R"(
extern "C" __global__ void reprise_adam(float* __restrict__ w, const float* __restrict__ g,
                                        float* __restrict__ m, float* __restrict__ v,
                                        const float* __restrict__ lr, const int* __restrict__ step,
                                        const float* __restrict__ beta1,
                                        const float* __restrict__ beta2,
                                        const float* __restrict__ eps,
                                        const float* __restrict__ wd,
                                        const float* __restrict__ clip,
                                        const float* __restrict__ unscale, int decoupled,
                                        long long n) {
  if (Skipped(unscale)) return;
  const AdamStep a = MakeAdamStep(lr[0], StepOf(step), beta1[0], beta2[0], eps[0], wd[0],
                                  clip != nullptr ? clip[0] : 1.0f, InverseScale(unscale),
                                  decoupled);
  AdamRange(a, w, g, m, v, n);
}
)"};
}

GeneratedKernel ClipCoefficientKernel() {
  return {"reprise_clip_coefficient", OptimizerHelpers() + R"(
extern "C" __global__ void reprise_clip_coefficient(const float* __restrict__ partials,
                                                    long long count,
                                                    const float* __restrict__ max_norm,
                                                    float* __restrict__ norm,
                                                    float* __restrict__ coef) {
  __shared__ double sums[REPRISE_NORM_BLOCK];
  const double sum = SumPartials(partials, count, sums);
  if (threadIdx.x == 0) {
    norm[0] = (float)sqrt(sum);
    coef[0] = ClipOfSum(sum, max_norm[0]);
  }
}
)"};
}

std::vector<GeneratedKernel> OptimizerKernels() {
  return {LrSchedule(),
          SgdUpdate(),
          SgdUpdateMulti(DType::kFloat32),
          SgdUpdateMulti(DType::kBFloat16),
          SgdUpdateMulti(DType::kFloat16),
          Adam(),
          AdamMulti(32),
          SgdMulti(32),
          GradSumSquares(32),
          ClipCoefficientKernel()};
}

}  // namespace reprise::codegen
