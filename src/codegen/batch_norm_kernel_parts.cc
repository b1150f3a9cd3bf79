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

// The statistics kernels' own finalize, in two levels of arrivals. BnSumChunks gives channel c
// the tree sum of 32 lanes, lane y the sum of chunks y, y + 32, ... in order. Here each block of
// a column tile arrives on its lane's ticket after storing its partials; the last block of each
// lane sums that lane for the tile's channels (BnSumLane) and arrives on the tile's ticket; the
// last of those adds the lanes in BnSumChunks' tree and finishes the channels (BnSumLanes). Each
// level's sums are spread over the block's threads, so no block walks every chunk alone, and no
// finalize launch runs between the statistics and the apply pass (a block's kBatchNormThreads
// threads cover the two sums of its tile's at most 128 channels). The tickets
// (kBatchNormTileTickets words a tile: the tile's, then one a lane) are words of the lane
// (LoweringContext::tickets): zero before the launch, and each level's last block zeroes its word
// again, so the next launch on the lane finds them zero.
const char kTileFinalize[] = R"(
// Arrives on `word`, which expects `expected` arrivals: true, in every thread, in the block that
// arrives last, which zeroes it. `wrote`: this thread stored what the last block will read.
__device__ __forceinline__ bool BnArriveLast(unsigned* word, unsigned expected, bool wrote) {
  __shared__ unsigned last;
  if (wrote) __threadfence();  // The stores are visible before the arrival is.
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    last = atomicAdd(word, 1u) == expected - 1;
    if (last) *word = 0u;
  }
  __syncthreads();
  if (last) __threadfence();  // The others' stores are read after their arrivals.
  return last != 0;
}

// The tile's first channel and its width; thread `pair` < 2·width sums array pair / width (0: the
// first sums, 1: the second) of channel first + pair % width.
struct BnTilePairs {
  int first, width, pair;
  __device__ BnTilePairs(int channels)
      : first(blockIdx.x * blockDim.x * BN_VEC),
        width(min((int)blockDim.x * BN_VEC, channels - (int)(blockIdx.x * blockDim.x * BN_VEC))),
        pair(threadIdx.y * blockDim.x + threadIdx.x) {}
  __device__ bool mine() const { return pair < 2 * width; }
  __device__ int array() const { return pair / width; }
  __device__ int channel() const { return first + pair % width; }
};

// Lane `lane` of every channel of the tile, as BnSumChunks adds it: chunks lane, lane + 32, ...
// in order from 0, into lane_sums[array][lane][channel]. Other blocks wrote the partials: read
// through L2. Returns whether this thread stored one.
__device__ __forceinline__ bool BnSumLane(const double* partial, double* lane_sums, int channels,
                                          int lane) {
  const BnTilePairs p(channels);
  if (!p.mine()) return false;
  const int chunks = gridDim.y;
  const double* from = partial + (long long)p.array() * chunks * channels + p.channel();
  double s = 0.0;
#pragma unroll 8
  for (int k = lane; k < chunks; k += 32) s += __ldcg(from + (long long)k * channels);
  lane_sums[((long long)p.array() * 32 + lane) * channels + p.channel()] = s;
  return true;
}

// BnSumChunks' tree over the 32 lanes at `from` (lane y at from[y·stride]; lanes from `lanes` on
// are 0): its node of level kHalf over lane y is the node of level 2·kHalf over lane y plus that
// over lane y + kHalf (level 32: the lane itself), evaluated depth first so that few sums are live.
template <int kHalf>
__device__ __forceinline__ double BnLaneTree(const double* from, long long stride, int lanes,
                                             int y) {
  if constexpr (kHalf == 32) {
    return y < lanes ? __ldcg(from + y * stride) : 0.0;
  } else {
    return BnLaneTree<2 * kHalf>(from, stride, lanes, y) +
           BnLaneTree<2 * kHalf>(from, stride, lanes, y + kHalf);
  }
}

// In the tile's last block: the 32 lanes of each channel in BnSumChunks' tree, then
// finish(c, first sums, second sums).
template <typename Finish>
__device__ void BnSumLanes(const double* lane_sums, int channels, Finish finish) {
  __shared__ double second[32 * BN_VEC];
  const BnTilePairs p(channels);
  double total = 0.0;
  if (p.mine()) {
    const double* from = lane_sums + (long long)p.array() * 32 * channels + p.channel();
    total = BnLaneTree<1>(from, channels, min(32, (int)gridDim.y), 0);
    if (p.array() == 1) second[p.pair % p.width] = total;
  }
  __syncthreads();
  if (p.mine() && p.array() == 0) finish(p.channel(), total, second[p.pair]);
}

// After BnReduceAndStore, in every block: the two levels of arrivals; finish runs in the tile's
// last block. `tickets` as above; `lane_sums` [2][32][channels] doubles of scratch.
template <typename Finish>
__device__ void BnFinalizeTile(unsigned* tickets, const double* partial, double* lane_sums,
                               int channels, Finish finish) {
  unsigned* tile = tickets + blockIdx.x * BN_TILE_TICKETS;
  const int lane = blockIdx.y % 32;
  const unsigned lane_chunks = (gridDim.y - lane + 31) / 32;
  if (!BnArriveLast(tile + 1 + lane, lane_chunks, threadIdx.y == 0)) return;
  const bool wrote = BnSumLane(partial, lane_sums, channels, lane);
  if (!BnArriveLast(tile, min(32u, gridDim.y), wrote)) return;
  BnSumLanes(lane_sums, channels, finish);
}
)";

std::string TileFinalizeSource() {
  return absl::StrCat("#define BN_TILE_TICKETS ", kBatchNormTileTickets, "\n", kFinish,
                      kTileFinalize);
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
