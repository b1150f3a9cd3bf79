#include "src/codegen/batch_norm_kernels.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernel_parts.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

using bn_parts::kApplyBody;
using bn_parts::KernelName;
using bn_parts::kFinish;
using bn_parts::kLoadBits;
using bn_parts::kReluMask;
using bn_parts::kSumChunks;
using bn_parts::MaskDefine;
using bn_parts::Prelude;
using bn_parts::TileFinalizeSource;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

BatchNormTiling BatchNormTilingFor(int64_t rows, int64_t channels, int vec, bool planar) {
  BatchNormTiling t;
  t.vec = vec;
  const int64_t threads_across = CeilDiv(channels, vec);
  t.block_x = 1;
  while (!planar && t.block_x < 32 && t.block_x < threads_across) t.block_x *= 2;
  t.block_y = kBatchNormThreads / t.block_x;
  t.column_tiles = CeilDiv(channels, int64_t{vec} * t.block_x);
  int64_t chunks = std::min(CeilDiv(kBatchNormTargetBlocks, t.column_tiles), kBatchNormMaxChunks);
  chunks = std::min(chunks, CeilDiv(rows, t.block_y * kBatchNormMinRowsPerThread));
  chunks = std::max<int64_t>(chunks, 1);
  t.rows_per_chunk = CeilDiv(rows, chunks);
  t.chunks = CeilDiv(rows, t.rows_per_chunk);  // No empty chunk.
  t.scratch_bytes = BatchNormCoefficientOffset(t.chunks, channels) + 3 * channels * 4;
  return t;
}

int64_t BatchNormCoefficientOffset(int64_t chunks, int64_t channels) {
  return 2 * chunks * channels * static_cast<int64_t>(sizeof(double));
}

int64_t BatchNormLaneSumsOffset(int64_t chunks, int64_t channels) {
  const int64_t end_of_coefficients =
      BatchNormCoefficientOffset(chunks, channels) + 3 * channels * 4;
  return (end_of_coefficients + 7) / 8 * 8;
}

int64_t BatchNormFinalizeScratchBytes(int64_t chunks, int64_t channels) {
  return BatchNormLaneSumsOffset(chunks, channels) +
         2 * 32 * channels * static_cast<int64_t>(sizeof(double));
}

GeneratedKernel BatchNormStats(int vec, DType dtype, int64_t plane, bool finalize) {
  const std::string name =
      KernelName(finalize ? "reprise_bn_stats_fin" : "reprise_bn_stats", vec, dtype, plane);
  // With `finalize`, the finalize kernel's arguments follow, and each tile's last block does its
  // work (kTileFinalize).
  const std::string finalize_params = !finalize ? "" : R"(, unsigned* __restrict__ tickets,
                   double* __restrict__ lane_sums, double epsilon, double momentum,
                   const float* __restrict__ gamma, float* __restrict__ running_mean,
                   float* __restrict__ running_var, float* __restrict__ saved_mean,
                   float* __restrict__ saved_invstd, float* __restrict__ coef)";
  const std::string finalize_tail = !finalize ? "" : R"(
  auto finish = [&](int c, double sum, double squares) {
    BnFinishForward(c, sum, squares, rows, epsilon, momentum, gamma, running_mean, running_var,
                    saved_mean, saved_invstd, coef);
  };
  BnFinalizeTile(tickets, partial, lane_sums, channels, finish);
)";
  return {name, Prelude(vec, dtype, plane) + (finalize ? TileFinalizeSource() : "") + R"(
struct BnStatsBody {
  static constexpr int kUnroll = 4;
  const elem_t* x;
  int channels, col;
  double sum[BN_VEC], squares[BN_VEC];
  struct Regs {
    BnVec x;
  };
  __device__ void Load(long long r, Regs& a) const { a.x = BnLoad(x + BnIndex(r, channels, col)); }
  __device__ void Use(long long, const Regs& a) {
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) {
      const double v = a.x.v[k];
      sum[k] += v;
      squares[k] = fma(v, v, squares[k]);
    }
  }
};

extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const elem_t* __restrict__ x, double* __restrict__ partial, long long rows,
                   int channels, long long rows_per_chunk)" +
                    finalize_params + R"() {
  BnStatsBody body{x, channels, BnColumn(), {}, {}};
  if (body.col < channels) BnWalkRows(rows, rows_per_chunk, body);
  BnReduceAndStore(body.sum, body.squares, partial, channels, body.col);
)" + finalize_tail + "}\n"};
}

GeneratedKernel BatchNormFinalize() {
  return {"reprise_bn_finalize", std::string(kSumChunks) + kFinish + R"(
extern "C" __global__ void __launch_bounds__(1024)
    reprise_bn_finalize(const double* __restrict__ partial, int chunks, int channels,
                        long long rows, double epsilon, double momentum,
                        const float* __restrict__ gamma, float* __restrict__ running_mean,
                        float* __restrict__ running_var, float* __restrict__ saved_mean,
                        float* __restrict__ saved_invstd, float* __restrict__ coef) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  double sum, squares;
  if (!BnSumChunks(partial, chunks, channels, c, sum, squares)) return;
  BnFinishForward(c, sum, squares, rows, epsilon, momentum, gamma, running_mean, running_var,
                  saved_mean, saved_invstd, coef);
}
)"};
}

GeneratedKernel BatchNormApply(int vec, DType dtype, int64_t plane, bool write_bits) {
  const std::string name =
      KernelName(write_bits ? "reprise_bn_apply_bits" : "reprise_bn_apply", vec, dtype, plane);
  return {name, Prelude(vec, dtype, plane) +
                    absl::StrCat("#define BN_WRITE_BITS ", write_bits ? 1 : 0, "\n") + kApplyBody +
                    R"(
extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const elem_t* __restrict__ x, const elem_t* __restrict__ residual,
                   const float* __restrict__ mean, const float* __restrict__ coef,
                   const float* __restrict__ beta, elem_t* __restrict__ y, long long rows,
                   int channels, long long rows_per_chunk, int relu,
                   unsigned char* __restrict__ keep_bits) {
  BnApplyBody body{x, residual, y, channels, BnColumn(), relu};
  body.keep_bits = keep_bits;
  if (body.col >= channels) return;
#pragma unroll
  for (int k = 0; k < BN_VEC; ++k) {
    body.mean[k] = mean[body.col + k];
    body.scale[k] = coef[body.col + k];
    body.shift[k] = beta[body.col + k];
  }
  BnWalkRows(rows, rows_per_chunk, body);
}
)"};
}

GeneratedKernel BatchNormApplySaved(int vec, DType dtype, int64_t plane) {
  const std::string name = KernelName("reprise_bn_apply_saved", vec, dtype, plane);
  return {name, Prelude(vec, dtype, plane) + kApplyBody + R"(
extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const elem_t* __restrict__ x, const elem_t* __restrict__ residual,
                   const float* __restrict__ gamma, const float* __restrict__ beta,
                   const float* __restrict__ mean, const float* __restrict__ invstd,
                   elem_t* __restrict__ y, long long rows, int channels,
                   long long rows_per_chunk, int relu) {
  BnApplyBody body{x, residual, y, channels, BnColumn(), relu};
  if (body.col >= channels) return;
#pragma unroll
  for (int k = 0; k < BN_VEC; ++k) {
    body.mean[k] = mean[body.col + k];
    // gamma·saved_invstd in float: the forward's finalize forms coef[0] the same way.
    body.scale[k] = gamma[body.col + k] * invstd[body.col + k];
    body.shift[k] = beta[body.col + k];
  }
  BnWalkRows(rows, rows_per_chunk, body);
}
)"};
}

GeneratedKernel BatchNormApplyChain(int vec, DType dtype, int64_t plane) {
  const std::string name = KernelName("reprise_bn_apply_chain", vec, dtype, plane);
  return {name, Prelude(vec, dtype, plane) +
                    absl::StrCat("#define BN_CHAIN_MAX ", kBatchNormChainMaxSteps, "\n") + R"(
struct BnChainStep {
  const elem_t* x;
  const float* gamma;
  const float* beta;
  const float* mean;
  const float* invstd;
  elem_t* y;  // Null: the step's value only feeds the next step.
};
struct BnChain {
  BnChainStep step[BN_CHAIN_MAX];
  int steps;
};

// Steps are indexed by constants (unrolled loops guarded by `steps`), so that the parameter stays
// in its constant bank and is not copied to local memory.
extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const BnChain chain, long long rows, int channels, long long rows_per_chunk) {
  // Each step's mean, scale (gamma·saved_invstd in float, as the forward forms it) and shift for
  // this block's columns; at most 32 threads across of 4 channels each.
  __shared__ float coef[BN_CHAIN_MAX][3][128];
  const int across = blockDim.x * BN_VEC;
  const int first = blockIdx.x * across;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int s = 0; s < BN_CHAIN_MAX; ++s) {
    if (s < chain.steps) {
      for (int j = t; j < across; j += blockDim.x * blockDim.y) {
        const int c = first + j;
        if (c < channels) {
          coef[s][0][j] = chain.step[s].mean[c];
          coef[s][1][j] = chain.step[s].gamma[c] * chain.step[s].invstd[c];
          coef[s][2][j] = chain.step[s].beta[c];
        }
      }
    }
  }
  __syncthreads();
  const int col = BnColumn(), j0 = threadIdx.x * BN_VEC;
  if (col >= channels) return;
  const long long end = min(rows, (blockIdx.y + 1) * rows_per_chunk);
  for (long long r = blockIdx.y * rows_per_chunk + threadIdx.y; r < end; r += blockDim.y) {
    const long long i = BnIndex(r, channels, col);
    BnVec x[BN_CHAIN_MAX];
#pragma unroll
    for (int s = 0; s < BN_CHAIN_MAX; ++s) {
      if (s < chain.steps) x[s] = BnLoad(chain.step[s].x + i);
    }
    float carry[BN_VEC];
#pragma unroll
    for (int s = 0; s < BN_CHAIN_MAX; ++s) {
      if (s < chain.steps) {
        BnVec out;
#pragma unroll
        for (int k = 0; k < BN_VEC; ++k) {
          // batch_norm_apply's expression; from the second step on + the previous value and the
          // ReLU, as batch_norm_apply with residual and relu adds its stored residual.
          float v = fmaf(x[s].v[k] - coef[s][0][j0 + k], coef[s][1][j0 + k], coef[s][2][j0 + k]);
          if (s > 0) {
            v += carry[k];
            if (!(v > 0.0f || v != v)) v = 0.0f;  // The relu op's: a NaN stays NaN.
          }
          out.v[k] = v;
          carry[k] = ToFloat(FromFloat(v));  // The element type's rounding, as stored and read.
        }
        if (chain.step[s].y != nullptr) BnStore(chain.step[s].y + i, out);
      }
    }
  }
}
)"};
}

GeneratedKernel BatchNormGradStats(int vec, DType dtype, int64_t plane,
                                   const BatchNormGradStatsForm& form) {
  const bool finalize = form.finalize;
  const std::string name =
      KernelName(absl::StrCat("reprise_bn_grad_stats", form.mask_from_x ? "_xmask" : "",
                              form.mask_from_bits ? "_bmask" : "", form.dy_addend ? "_dsum" : "",
                              form.write_masked ? "_mdy" : "", finalize ? "_fin" : ""),
                 vec, dtype, plane);
  // With `finalize`, the finalize kernel's outputs follow, and each tile's last block does its
  // work (kTileFinalize).
  const std::string finalize_params = !finalize ? "" : R"(,
                   unsigned* __restrict__ tickets, double* __restrict__ lane_sums,
                   float* __restrict__ dgamma, float* __restrict__ dbeta,
                   float* __restrict__ coef)";
  const std::string finalize_tail = !finalize ? "" : R"(
  auto finish = [&](int c, double sum, double dot) {
    BnFinishBackward(c, sum, dot, rows, channels, gamma, invstd, dgamma, dbeta, coef);
  };
  BnFinalizeTile(tickets, partial, lane_sums, channels, finish);
)";
  return {name, Prelude(vec, dtype, plane) + MaskDefine(form.mask_from_x, form.mask_from_bits) +
                    absl::StrCat("#define BN_WRITE_MASKED ", form.write_masked ? 1 : 0,
                                 "\n#define BN_DY_ADDEND ", form.dy_addend ? 1 : 0, "\n") +
                    kLoadBits + kReluMask + (finalize ? TileFinalizeSource() : "") + R"(
struct BnGradStatsBody {
  // Two rows of three loads: four would not fit in the 64 registers of 4 blocks per SM. (With
  // BN_DY_ADDEND, four loads a row: ptxas for sm_90 spills nothing in 16 bits, one word in
  // float32.)
  static constexpr int kUnroll = 2;
  const elem_t* dy;
  const elem_t* act_out;
  const elem_t* x;
  elem_t* masked_dy;
  int channels, col;
  BnReluMask mask;
  double mean[BN_VEC], sum[BN_VEC], dot[BN_VEC];
  const unsigned char* act_bits;  // BN_MASK_FROM_BITS: the forward's keep mask.
  const elem_t* dy_addend;        // BN_DY_ADDEND: dy's second summand.
  struct Regs {
    BnVec dy, x, act;
#if BN_DY_ADDEND
    BnVec dy2;
#endif
  };
  __device__ void Load(long long r, Regs& a) const {
    const long long i = BnIndex(r, channels, col);
    a.dy = BnLoad(dy + i);
#if BN_DY_ADDEND
    a.dy2 = BnLoad(dy_addend + i);
#endif
    a.x = BnLoad(x + i);
#if BN_MASK_FROM_BITS
    BnLoadBits(act_bits, i, a.act);
#elif !BN_MASK_FROM_X
    if (act_out != nullptr) a.act = BnLoad(act_out + i);
#endif
  }
  __device__ void Use(long long r, const Regs& a) {
    BnVec masked;
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) {
#if BN_DY_ADDEND
      // The sum an add node would have stored: rounded to the element type.
      const float d = ToFloat(FromFloat(a.dy.v[k] + a.dy2.v[k]));
#else
      const float d = a.dy.v[k];
#endif
      masked.v[k] = mask.Keep(act_out, a.act.v[k], a.x.v[k], (float)mean[k], k) ? d : 0.0f;
      const double g = masked.v[k];
      sum[k] += g;
      dot[k] = fma(g, (double)a.x.v[k] - mean[k], dot[k]);
    }
#if BN_WRITE_MASKED
    // g is a value of dy's type or zero: stored in dy's type, it is exact.
    BnStore(masked_dy + BnIndex(r, channels, col), masked);
#endif
  }
};

extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const elem_t* __restrict__ dy, const elem_t* __restrict__ act_out,
                   const elem_t* __restrict__ x, const float* __restrict__ mean,
                   const float* __restrict__ gamma, const float* __restrict__ invstd,
                   const float* __restrict__ beta, double* __restrict__ partial,
                   elem_t* __restrict__ masked_dy, long long rows, int channels,
                   long long rows_per_chunk, const unsigned char* __restrict__ act_bits,
                   const elem_t* __restrict__ dy_addend)" +
                    finalize_params + R"() {
  BnGradStatsBody body{dy, act_out, x, masked_dy, channels, BnColumn(), {}, {}, {}, {}};
  body.act_bits = act_bits;
  body.dy_addend = dy_addend;
  if (body.col < channels) {
    body.mask.Init(body.col, gamma, invstd, beta);
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) body.mean[k] = mean[body.col + k];
    BnWalkRows(rows, rows_per_chunk, body);
  }
  BnReduceAndStore(body.sum, body.dot, partial, channels, body.col);
)" + finalize_tail + "}\n"};
}

GeneratedKernel BatchNormGradFinalize() {
  return {"reprise_bn_grad_finalize", std::string(kSumChunks) + kFinish + R"(
extern "C" __global__ void __launch_bounds__(1024)
    reprise_bn_grad_finalize(const double* __restrict__ partial, int chunks, int channels,
                             long long rows, const float* __restrict__ gamma,
                             const float* __restrict__ invstd, float* __restrict__ dgamma,
                             float* __restrict__ dbeta, float* __restrict__ coef) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  double sum, dot;
  if (!BnSumChunks(partial, chunks, channels, c, sum, dot)) return;
  BnFinishBackward(c, sum, dot, rows, channels, gamma, invstd, dgamma, dbeta, coef);
}
)"};
}

GeneratedKernel BatchNormGradApply(int vec, DType dtype, int64_t plane, bool mask_from_x,
                                   bool mask_from_bits) {
  const std::string name =
      KernelName(absl::StrCat("reprise_bn_grad_apply", mask_from_x ? "_xmask" : "",
                              mask_from_bits ? "_bmask" : ""),
                 vec, dtype, plane);
  return {name, Prelude(vec, dtype, plane) + MaskDefine(mask_from_x, mask_from_bits) + kLoadBits +
                    kReluMask + R"(
struct BnGradApplyBody {
  static constexpr int kUnroll = 4;
  const elem_t* dy;
  const elem_t* act_out;
  const elem_t* x;
  elem_t* dx;
  int channels, col;
  BnReluMask mask;
  float mean[BN_VEC], a[BN_VEC], b[BN_VEC], c[BN_VEC];
  const unsigned char* act_bits;  // BN_MASK_FROM_BITS: the forward's keep mask.
  struct Regs {
    BnVec dy, x, act;
  };
  __device__ void Load(long long r, Regs& in) const {
    const long long i = BnIndex(r, channels, col);
    in.dy = BnLoad(dy + i);
    in.x = BnLoad(x + i);
#if BN_MASK_FROM_BITS
    BnLoadBits(act_bits, i, in.act);
#elif !BN_MASK_FROM_X
    if (act_out != nullptr) in.act = BnLoad(act_out + i);
#endif
  }
  __device__ void Use(long long r, const Regs& in) const {
    BnVec out;
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) {
      const float g = mask.Keep(act_out, in.act.v[k], in.x.v[k], mean[k], k) ? in.dy.v[k] : 0.0f;
      out.v[k] = fmaf(a[k], g, -fmaf(c[k], in.x.v[k] - mean[k], b[k]));
    }
    BnStore(dx + BnIndex(r, channels, col), out);
  }
};

extern "C" __global__ void __launch_bounds__(256, 4)
    )" + name + R"((const elem_t* __restrict__ dy, const elem_t* __restrict__ act_out,
                   const elem_t* __restrict__ x, const float* __restrict__ mean,
                   const float* __restrict__ coef, const float* __restrict__ gamma,
                   const float* __restrict__ invstd, const float* __restrict__ beta,
                   elem_t* __restrict__ dx, long long rows, int channels,
                   long long rows_per_chunk, const unsigned char* __restrict__ act_bits) {
  BnGradApplyBody body{dy, act_out, x, dx, channels, BnColumn(), {}};
  body.act_bits = act_bits;
  if (body.col >= channels) return;
  body.mask.Init(body.col, gamma, invstd, beta);
#pragma unroll
  for (int k = 0; k < BN_VEC; ++k) {
    body.mean[k] = mean[body.col + k];
    body.a[k] = coef[body.col + k];
    body.b[k] = coef[channels + body.col + k];
    body.c[k] = coef[2 * channels + body.col + k];
  }
  BnWalkRows(rows, rows_per_chunk, body);
}
)"};
}

std::vector<GeneratedKernel> BatchNormKernels() {
  std::vector<GeneratedKernel> kernels = {BatchNormFinalize(), BatchNormGradFinalize()};
  for (DType dtype : kKernelElementTypes) {
    for (int vec : {4, 1}) {
      kernels.push_back(BatchNormStats(vec, dtype));
      kernels.push_back(BatchNormApply(vec, dtype));
      kernels.push_back(BatchNormApplySaved(vec, dtype));
      kernels.push_back(BatchNormApplyChain(vec, dtype));
      kernels.push_back(BatchNormApply(vec, dtype, 0, /*write_bits=*/true));
      for (bool mask_from_x : {false, true}) {
        for (bool write_masked : {false, true}) {
          kernels.push_back(BatchNormGradStats(
              vec, dtype, 0, {.mask_from_x = mask_from_x, .write_masked = write_masked}));
        }
        kernels.push_back(BatchNormGradApply(vec, dtype, 0, mask_from_x));
      }
      for (bool write_masked : {false, true}) {
        kernels.push_back(BatchNormGradStats(
            vec, dtype, 0, {.write_masked = write_masked, .mask_from_bits = true}));
      }
      kernels.push_back(BatchNormGradApply(vec, dtype, 0, false, /*mask_from_bits=*/true));
      // The statistics kernels that finalize, in the forms ResNet's blocks take.
      kernels.push_back(BatchNormStats(vec, dtype, 0, /*finalize=*/true));
      kernels.push_back(BatchNormGradStats(vec, dtype, 0, {.finalize = true}));
      kernels.push_back(BatchNormGradStats(
          vec, dtype, 0, {.write_masked = true, .mask_from_bits = true, .finalize = true}));
      // A residual block's input gradient summed as it is loaded, in both of those forms.
      for (bool finalize : {false, true}) {
        kernels.push_back(BatchNormGradStats(vec, dtype, 0,
                                             {.write_masked = true,
                                              .mask_from_bits = true,
                                              .finalize = finalize,
                                              .dy_addend = true}));
      }
    }
    // NCHW, for a plane size that is not a power of two (7x7, ResNet's last stage).
    kernels.push_back(BatchNormStats(1, dtype, 49));
    kernels.push_back(BatchNormApply(1, dtype, 49));
    kernels.push_back(BatchNormApplySaved(1, dtype, 49));
    kernels.push_back(BatchNormApplyChain(1, dtype, 49));
    for (bool mask_from_x : {false, true}) {
      for (bool write_masked : {false, true}) {
        kernels.push_back(BatchNormGradStats(
            1, dtype, 49, {.mask_from_x = mask_from_x, .write_masked = write_masked}));
      }
      kernels.push_back(BatchNormGradApply(1, dtype, 49, mask_from_x));
    }
    kernels.push_back(BatchNormStats(1, dtype, 49, /*finalize=*/true));
    kernels.push_back(BatchNormGradStats(1, dtype, 49, {.finalize = true}));
    // NCHW has no keep bits: its residual sums come with the mask from the ReLU's output.
    kernels.push_back(BatchNormGradStats(1, dtype, 49, {.write_masked = true, .dy_addend = true}));
  }
  return kernels;
}

}  // namespace reprise::codegen
