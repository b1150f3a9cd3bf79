// The tiled batch-norm kernels' shared source pieces (batch_norm_kernel_parts.h).
#include "src/codegen/batch_norm_kernel_parts.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen::bn_parts {

// Helpers of the tiled kernels, for one element type and vector width: loads that widen to float
// and stores that round from it (element_type.h), the row walk and the block's fixed-order
// reduction. For float32 the loads and stores are plain float and float4 accesses, so the float32
// kernels compute what they did before bfloat16 existed.
std::string Prelude(int vec, DType dtype, int64_t plane) {
  return absl::StrCat(ElementTypeSource(dtype), "#define BN_VEC ", vec, "\n#define BN_PLANE ",
                      plane, "LL\n", R"(
struct BnVec {
  float v[BN_VEC];
};
// Load4 and Store4 need 16-byte (float32) or 8-byte (bfloat16) alignment: the lowering picks
// BN_VEC 1 where a tensor or a row start lacks it.
__device__ __forceinline__ BnVec BnLoad(const elem_t* p) {
  BnVec r;
#if BN_VEC == 4
  const float4 t = Load4(p);
  r.v[0] = t.x; r.v[1] = t.y; r.v[2] = t.z; r.v[3] = t.w;
#else
  r.v[0] = ToFloat(*p);
#endif
  return r;
}
__device__ __forceinline__ void BnStore(elem_t* p, const BnVec& a) {
#if BN_VEC == 4
  Store4(p, make_float4(a.v[0], a.v[1], a.v[2], a.v[3]));
#else
  *p = FromFloat(a.v[0]);
#endif
}

// Where element (row r, channel col) of the [rows, channels] view is stored. Channels-last
// (BN_PLANE 0): row-major. NCHW: row r is image r / plane, pixel r % plane, so a channel's
// values lie in planes of BN_PLANE = H·W contiguous elements (a constant, so the division is a
// multiply and a shift).
__device__ __forceinline__ long long BnIndex(long long r, int channels, int col) {
#if BN_PLANE == 0
  return r * channels + col;
#else
  return (r / BN_PLANE * channels + col) * BN_PLANE + r % BN_PLANE;
#endif
}

// This thread's first channel. Threads past the last channel hold none, but still take part in
// the block's reduction.
__device__ __forceinline__ int BnColumn() {
  return (blockIdx.x * blockDim.x + threadIdx.x) * BN_VEC;
}

// Stores the ReLU's keep bits of this thread's BN_VEC elements (i .. i + BN_VEC - 1 of a
// row-major tensor, channels % 16 == 0), set where the stored value is > 0: the mask holds 4
// elements to a byte (bit k of byte e / 4 for element e = 4·(e / 4) + k, the byte's upper half
// zero), so that each thread of four channels stores one byte of its own and a warp's bytes of a
// row are contiguous. One channel per thread: the 4 threads of a byte (consecutive lanes of one
// row, active together) combine their bits first.
__device__ __forceinline__ void BnStoreBits(unsigned char* bits, long long i, const BnVec& out) {
#if BN_VEC == 4
  unsigned b = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) b |= (ToFloat(FromFloat(out.v[k])) > 0.0f ? 1u : 0u) << k;
  bits[i / 4] = (unsigned char)b;
#else
  unsigned b = (ToFloat(FromFloat(out.v[0])) > 0.0f ? 1u : 0u) << (i % 4);
  const unsigned active = __activemask();
  b |= __shfl_xor_sync(active, b, 1);
  b |= __shfl_xor_sync(active, b, 2);
  if (i % 4 == 0) bits[i / 4] = (unsigned char)b;
#endif
}

// Walks this thread's rows of its block's chunk (first row threadIdx.y, stride blockDim.y) in
// increasing order: body.Load for U = Body::kUnroll rows, then body.Use for the same U in order,
// so that U rows of loads are in flight per thread.
template <typename Body>
__device__ __forceinline__ void BnWalkRows(long long rows, long long rows_per_chunk, Body& body) {
  const long long step = blockDim.y;
  const long long end = min(rows, (blockIdx.y + 1) * rows_per_chunk);
  constexpr int U = Body::kUnroll;
  long long r = blockIdx.y * rows_per_chunk + threadIdx.y;
  for (; r + (U - 1) * step < end; r += U * step) {
    typename Body::Regs regs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) body.Load(r + u * step, regs[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) body.Use(r + u * step, regs[u]);
  }
  for (; r < end; r += step) {
    typename Body::Regs regs;
    body.Load(r, regs);
    body.Use(r, regs);
  }
}

// Sums a and b over threadIdx.y in a fixed pairwise tree (blockDim.y is a power of two) and
// stores the block's totals as partial[0][chunk][col..] and partial[1][chunk][col..].
__device__ __forceinline__ void BnReduceAndStore(double (&a)[BN_VEC], double (&b)[BN_VEC],
                                                 double* __restrict__ partial, int channels,
                                                 int col) {
  __shared__ double sa[256 * BN_VEC], sb[256 * BN_VEC];
  const int t = (threadIdx.y * blockDim.x + threadIdx.x) * BN_VEC;
#pragma unroll
  for (int k = 0; k < BN_VEC; ++k) sa[t + k] = a[k], sb[t + k] = b[k];
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) {
      const int o = t + half * blockDim.x * BN_VEC;
#pragma unroll
      for (int k = 0; k < BN_VEC; ++k) {
        a[k] += sa[o + k], b[k] += sb[o + k];
        sa[t + k] = a[k], sb[t + k] = b[k];
      }
    }
  }
  if (threadIdx.y == 0 && col < channels) {
    const long long at = (long long)blockIdx.y * channels + col;
    const long long second = (long long)gridDim.y * channels;
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) partial[at + k] = a[k], partial[second + at + k] = b[k];
  }
}
)");
}

// Sums the two partial arrays over chunks for the finalize kernels, launched with blocks of
// 32x32 threads: thread x is a channel, thread y adds chunks y, y + 32, ... in order, then a
// fixed pairwise tree over y. Thread y == 0 returns true with the totals; 32 lanes per channel
// keep the chain of dependent loads short when there are hundreds of chunks.
const char kSumChunks[] = R"(
__device__ __forceinline__ bool BnSumChunks(const double* __restrict__ partial, int chunks,
                                            int channels, int c, double& a, double& b) {
  __shared__ double sa[32 * 32], sb[32 * 32];
  a = 0.0, b = 0.0;
  if (c < channels) {
    const long long second = (long long)chunks * channels;
    for (int k = threadIdx.y; k < chunks; k += 32) {
      a += partial[(long long)k * channels + c];
      b += partial[second + (long long)k * channels + c];
    }
  }
  const int t = threadIdx.y * 32 + threadIdx.x;
  sa[t] = a, sb[t] = b;
  for (int half = 16; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) {
      a += sa[t + half * 32], b += sb[t + half * 32];
      sa[t] = a, sb[t] = b;
    }
  }
  return threadIdx.y == 0 && c < channels;
}
)";

// What a channel's totals become, forward and backward: one body for the finalize kernels and for
// the statistics kernels that finalize in a tile's last block (kTileFinalize), so both forms write
// the same bits.
const char kFinish[] = R"(
__device__ __forceinline__ void BnFinishForward(int c, double sum, double squares, long long rows,
                                                double epsilon, double momentum,
                                                const float* gamma, float* running_mean,
                                                float* running_var, float* saved_mean,
                                                float* saved_invstd, float* coef) {
  const double m = (double)rows;
  const double mean = sum / m;
  const double var = fmax(squares / m - mean * mean, 0.0);  // Biased.
  const double invstd = 1.0 / sqrt(var + epsilon);
  const float saved = (float)invstd;
  saved_mean[c] = (float)mean;
  saved_invstd[c] = saved;
  coef[c] = gamma[c] * saved;  // From the saved invstd: what batch_norm_apply uses.
  // PyTorch's running update, with the unbiased variance.
  running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
}

// Backward: dbeta = Σg, dgamma = Σg·x̂, and the apply pass's factors:
// dx = scale·(g - Σg/M - x̂·Σg·x̂/M) = coef0·g - coef1 - coef2·(x - mean).
__device__ __forceinline__ void BnFinishBackward(int c, double sum, double dot, long long rows,
                                                 int channels, const float* gamma,
                                                 const float* invstd, float* dgamma,
                                                 float* dbeta, float* coef) {
  const double m = (double)rows, s = invstd[c];
  const double d_gamma = dot * s;
  const double scale = gamma[c] * s;
  dbeta[c] = (float)sum;
  dgamma[c] = (float)d_gamma;
  coef[c] = (float)scale;
  coef[channels + c] = (float)(scale * sum / m);
  coef[2 * channels + c] = (float)(scale * s * d_gamma / m);
}
)";

// The statistics kernels' own finalize. Every block of a column tile arrives on the tile's ticket
// after storing its partials; the last to arrive sums the tile's partials and finishes its
// channels, so no finalize launch runs between the statistics and the apply pass. The tickets are
// words of the lane (LoweringContext::tickets): zero before the launch, and the last block zeroes
// its tile's again, so the next launch on the lane finds them zero.
const char kTileFinalize[] = R"(
// Whether this block is its column tile's last to arrive (the same answer in every thread).
__device__ __forceinline__ bool BnLastOfTile(unsigned* tickets) {
  __shared__ unsigned last;
  // This block's partials (stored by its threads of row 0, BnReduceAndStore) are visible before
  // its arrival is.
  if (threadIdx.y == 0) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    last = atomicAdd(tickets + blockIdx.x, 1u) == gridDim.y - 1;
    if (last) tickets[blockIdx.x] = 0u;  // Every block of the tile has arrived.
  }
  __syncthreads();
  if (last) __threadfence();  // The other blocks' partials are read after their arrivals.
  return last != 0;
}

// In the tile's last block: each of the tile's channels summed over the chunks in BnSumChunks'
// order (32 lanes a channel, lane y adding chunks y, y + 32, ... in order, then the same pairwise
// tree over the lanes), so the totals have the finalize kernel's bits; then finish(c, a, b).
// Four threads take a channel, thread j its lanes j, j + 4, ..., j + 28 side by side (their loads
// in flight together); the tree's levels 16, 8 and 4 pair lanes of one thread, levels 2 and 1 the
// four threads, through shuffles. Other blocks wrote the partials: read through L2.
template <typename Finish>
__device__ void BnSumTile(const double* partial, int channels, Finish finish) {
  constexpr int kThreads = 4, kLanes = 32 / kThreads, kChannelsAtOnce = BN_THREADS / kThreads;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int j = t % kThreads;
  const int chunks = gridDim.y;
  const int first = blockIdx.x * blockDim.x * BN_VEC;
  const int width = min((int)blockDim.x * BN_VEC, channels - first);
  const long long second = (long long)chunks * channels;
  for (int c0 = 0; c0 < width; c0 += kChannelsAtOnce) {
    const int offset = c0 + t / kThreads;
    const bool mine = offset < width;
    const int c = first + offset;
    double a[kLanes], b[kLanes];
#pragma unroll
    for (int i = 0; i < kLanes; ++i) a[i] = 0.0, b[i] = 0.0;
    if (mine) {
      for (int k0 = 0; k0 < chunks; k0 += 32) {
#pragma unroll
        for (int i = 0; i < kLanes; ++i) {
          const int k = k0 + j + i * kThreads;  // Lane j + kThreads·i's next chunk.
          if (k < chunks) {
            a[i] += __ldcg(partial + (long long)k * channels + c);
            b[i] += __ldcg(partial + second + (long long)k * channels + c);
          }
        }
      }
    }
    // Lane y < half adds lane y + half: here a[i] += a[i + half / kThreads].
#pragma unroll
    for (int half = 16; half >= kThreads; half /= 2) {
#pragma unroll
      for (int i = 0; i < half / kThreads; ++i) {
        a[i] += a[i + half / kThreads];
        b[i] += b[i + half / kThreads];
      }
    }
#pragma unroll
    for (int half = kThreads / 2; half > 0; half /= 2) {
      a[0] += __shfl_down_sync(0xffffffffu, a[0], half);
      b[0] += __shfl_down_sync(0xffffffffu, b[0], half);
    }
    if (j == 0 && mine) finish(c, a[0], b[0]);
  }
}
)";

std::string TileFinalizeSource() {
  return absl::StrCat("#define BN_THREADS ", kBatchNormThreads, "\n", kFinish, kTileFinalize);
}

// reprise_bn_apply_v4 (float32) or reprise_bn_apply_v4_bf16: one kernel-store entry per width
// and type.
std::string KernelName(absl::string_view base, int vec, DType dtype, int64_t plane) {
  return ElementKernelName(
      absl::StrCat(base, "_v", vec, plane == 0 ? "" : absl::StrCat("_nchw", plane)), dtype);
}

// The ReLU's keep mask for the backward kernels: from its stored output (act > 0), or, with no
// act_out and a shift (beta) given, recomputed from x as the forward's apply writes y (the same
// float expression, rounded to the element type), so the mask has the forward's bits without a
// pass over y. Neither: no ReLU, keep everything.
// BN_MASK_FROM_X is a constant of the kernel (its own name), so each form keeps only its registers.
const char kReluMask[] = R"(
#ifndef BN_MASK_FROM_BITS
#define BN_MASK_FROM_BITS 0
#endif
struct BnReluMask {
#if BN_MASK_FROM_X
  float scale[BN_VEC], shift[BN_VEC];
#endif
  __device__ void Init(int col, const float* gamma, const float* invstd, const float* beta) {
#if BN_MASK_FROM_X
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) {
      scale[k] = gamma[col + k] * invstd[col + k];  // As the forward's finalize forms it.
      shift[k] = beta[col + k];
    }
#endif
  }
  // `mean` is the saved mean as float (exact from the double the statistics kernel holds).
  __device__ bool Keep(const elem_t* act_out, float act, float x, float mean, int k) const {
#if BN_MASK_FROM_X
    return ToFloat(FromFloat(fmaxf(fmaf(x - mean, scale[k], shift[k]), 0.0f))) > 0.0f;
#elif BN_MASK_FROM_BITS
    return act > 0.0f;  // The bit, as 1 or 0 (BnLoadBits).
#else
    return act_out == nullptr || act > 0.0f;
#endif
  }
};
)";

std::string MaskDefine(bool mask_from_x, bool mask_from_bits) {
  return absl::StrCat("#define BN_MASK_FROM_X ", mask_from_x ? 1 : 0,
                      "\n#define BN_MASK_FROM_BITS ", mask_from_bits ? 1 : 0, "\n");
}

// The ReLU's keep bits of a row's BN_VEC elements as 1 or 0 in `act`, from the forward's mask
// (BnStoreBits' layout).
const char kLoadBits[] = R"(
__device__ __forceinline__ void BnLoadBits(const unsigned char* bits, long long i, BnVec& act) {
  const unsigned w = (unsigned)bits[i / 4] >> (i % 4);
#pragma unroll
  for (int k = 0; k < BN_VEC; ++k) act.v[k] = (w >> k) & 1u ? 1.0f : 0.0f;
}
)";

// y = act((x - mean)·scale + shift (+ residual)) over one thread's rows, in float, rounded once
// at the store. The forward's apply and batch_norm_apply's recompute both run it, so a
// recomputed y has the forward's bits.
const char kApplyBody[] = R"(
#ifndef BN_WRITE_BITS
#define BN_WRITE_BITS 0
#endif
struct BnApplyBody {
  static constexpr int kUnroll = 4;
  const elem_t* x;
  const elem_t* residual;
  elem_t* y;
  int channels, col, relu;
  float mean[BN_VEC], scale[BN_VEC], shift[BN_VEC];
  unsigned char* keep_bits;  // BN_WRITE_BITS: the ReLU's keep mask (BnStoreBits).
  struct Regs {
    BnVec x, residual;
  };
  __device__ void Load(long long r, Regs& a) const {
    a.x = BnLoad(x + BnIndex(r, channels, col));
    if (residual != nullptr) a.residual = BnLoad(residual + BnIndex(r, channels, col));
  }
  __device__ void Use(long long r, const Regs& a) const {
    BnVec out;
#pragma unroll
    for (int k = 0; k < BN_VEC; ++k) {
      float v = fmaf(a.x.v[k] - mean[k], scale[k], shift[k]);
      if (residual != nullptr) v += a.residual.v[k];
      // The relu op's expression: a NaN stays NaN (fmaxf would drop it).
      out.v[k] = relu && !(v > 0.0f || v != v) ? 0.0f : v;
    }
    BnStore(y + BnIndex(r, channels, col), out);
#if BN_WRITE_BITS
    BnStoreBits(keep_bits, BnIndex(r, channels, col), out);  // The mask the backward reads.
#endif
  }
};
)";

}  // namespace reprise::codegen::bn_parts
