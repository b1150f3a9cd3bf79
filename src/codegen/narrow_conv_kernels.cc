#include "src/codegen/narrow_conv_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

constexpr int kTileCols = 16;         // Output columns per tile: one MMA fragment's rows.
constexpr int kForwardTileRows = 16;  // Two rows per warp.
constexpr int kWgradTileRows = 8;     // 128 positions: 16 TF32 or 8 16-bit reduction steps.

bool Half(const NarrowConvShape& s) { return IsLowPrecision(s.dtype); }
int Step(const NarrowConvShape& s) { return Half(s) ? 16 : 8; }  // The MMA's reduction depth.
int OperandBytes(const NarrowConvShape& s) { return Half(s) ? 2 : 4; }
int64_t Taps(const NarrowConvShape& s) { return s.c * s.r * s.s; }
int64_t PaddedTaps(const NarrowConvShape& s) { return RoundUp(Taps(s), Step(s)); }

// Shared-memory row pitches, in operands, chosen so that a fragment's 32 loads hit 32 banks.
// Filter rows (forward): ldmatrix reads 8 rows of 16 bytes at once, so rows start 4 words apart
// modulo 32.
int64_t FilterPitch(const NarrowConvShape& s) {
  return Half(s) ? RoundUp(PaddedTaps(s), 64) + 8 : RoundUp(PaddedTaps(s), 32) + 4;
}
// Gradient rows (weight gradient): lane (g, t) reads position row t, channel g (TF32), or
// ldmatrix reads 8 rows of 16 bytes (16-bit): K + 8 operands puts the rows 8 (4) words apart.
int64_t GradientPitch(const NarrowConvShape& s) { return s.k + 8; }

struct Patch {
  int64_t rows = 0, cols = 0, operands = 0;
};
Patch PatchFor(const NarrowConvShape& s, int tile_rows) {
  Patch p;
  p.rows = (tile_rows - 1) * s.stride_h + s.r;
  p.cols = (kTileCols - 1) * s.stride_w + s.s;
  p.operands = p.rows * p.cols * s.c;
  return p;
}

// Bytes of a shared-memory region of `operands` operands, kept 16-byte aligned.
int64_t RegionBytes(const NarrowConvShape& s, int64_t operands) {
  return RoundUp(operands * OperandBytes(s), 16);
}

// A kernel's shared memory: its first operand array (the filter, or the gradient tile) at 0,
// then the input patch, then the tap offsets (ints); each region 16-byte aligned.
struct SharedLayout {
  int64_t patch = 0, taps = 0, bytes = 0;
};
SharedLayout LayoutAfter(const NarrowConvShape& s, int64_t first_operands, int tile_rows) {
  SharedLayout l;
  l.patch = RegionBytes(s, first_operands);
  l.taps = l.patch + RegionBytes(s, PatchFor(s, tile_rows).operands);
  l.bytes = l.taps + 4 * PaddedTaps(s);
  return l;
}
SharedLayout ForwardLayout(const NarrowConvShape& s) {
  return LayoutAfter(s, s.k * FilterPitch(s), kForwardTileRows);
}
SharedLayout WgradLayout(const NarrowConvShape& s) {
  return LayoutAfter(s, kWgradTileRows * kTileCols * GradientPitch(s), kWgradTileRows);
}

int Tiles(const NarrowConvShape& s, int tile_rows) {
  return static_cast<int>(s.n * CeilDiv(s.p, tile_rows) * CeilDiv(s.q, kTileCols));
}

std::string KernelName(const char* base, const NarrowConvShape& s) {
  return ElementKernelName(base, s.dtype);
}

// The constants and device helpers both kernels share.
std::string Prologue(const NarrowConvShape& s, int tile_rows) {
  const Patch patch = PatchFor(s, tile_rows);
  std::string code = ElementTypeSource(s.dtype);
  absl::StrAppend(
      &code, "#define NC_DEV __device__ __forceinline__\n", "constexpr int kH = ", s.h,
      ", kW = ", s.w, ", kC = ", s.c, ", kK = ", s.k, ", kR = ", s.r, ", kS = ", s.s,
      ";\nconstexpr int kSH = ", s.stride_h, ", kSW = ", s.stride_w, ", kPH = ", s.pad_h,
      ", kPW = ", s.pad_w, ", kP = ", s.p, ", kQ = ", s.q, ";\nconstexpr int kTaps = ", Taps(s),
      ", kKP = ", PaddedTaps(s), ", kStep = ", Step(s), ";\nconstexpr int kTileRows = ", tile_rows,
      ", kTilePositions = ", tile_rows * kTileCols, ", kTilesP = ", CeilDiv(s.p, tile_rows),
      ", kTilesQ = ", CeilDiv(s.q, kTileCols), ", kTiles = ", Tiles(s, tile_rows),
      ";\nconstexpr int kPatchH = ", patch.rows, ", kPatchW = ", patch.cols,
      ", kPatch = ", patch.operands, ";\nconstexpr int kThreads = ", kNarrowConvThreads, ";\n");
  if (Half(s)) {
    const char* type = s.dtype == DType::kBFloat16 ? "bf16" : "f16";
    absl::StrAppend(&code, R"(
typedef unsigned short op_t;  // The 16 bits as stored.
NC_DEV op_t Op(elem_t v) { return v; }
NC_DEV unsigned Pack(op_t first, op_t second) {
  return static_cast<unsigned>(first) | (static_cast<unsigned>(second) << 16);
}
// d += a b on the tensor cores, one warp: m16n8k16, float accumulators.
NC_DEV void Mma(float* d, const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.)",
                    type, ".", type, R"(.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
NC_DEV void StorePair(elem_t* p, float a, float b) {
  *reinterpret_cast<unsigned*>(p) = PackTwo(a, b);
}
typedef uint2 raw4_t;  // Four consecutive elements as stored.
NC_DEV op_t Element(const raw4_t& v, int e) {
  const unsigned word = e < 2 ? v.x : v.y;
  return static_cast<op_t>(e % 2 ? word >> 16 : word & 0xffffu);
}
)");
  } else {
    absl::StrAppend(&code, R"(
typedef unsigned op_t;  // The TF32 operand: the float rounded as the tensor cores take it.
NC_DEV op_t Op(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}
// d += a b on the tensor cores, one warp: m16n8k8, TF32 operands.
NC_DEV void Mma(float* d, const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Only the 16-bit paths pack; `if constexpr` outside a template still compiles both branches.
NC_DEV unsigned Pack(op_t first, op_t) { return first; }
NC_DEV void StorePair(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
typedef float4 raw4_t;  // Four consecutive elements as stored.
NC_DEV op_t Element(const raw4_t& v, int e) {
  return Op(e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w);
}
)");
  }
  absl::StrAppend(&code, R"(
// The tile's input window: patch[(ih * kPatchW + iw) * kC + c] = x[n][h0 + ih][w0 + iw][c], zero
// outside the image. Every load is issued before the first store, so a tile waits for one
// memory latency, not one per element.
NC_DEV void LoadPatch(op_t* patch, const elem_t* __restrict__ x, int n, int h0, int w0) {
  constexpr int kPer = (kPatch + kThreads - 1) / kThreads;
  elem_t v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = threadIdx.x + u * kThreads;
    const int ih = i / (kPatchW * kC), rest = i - ih * (kPatchW * kC);
    const int iw = rest / kC, c = rest - iw * kC;
    const int h = h0 + ih, w = w0 + iw;
    v[u] = elem_t(0);
    if (i < kPatch && h >= 0 && h < kH && w >= 0 && w < kW) {
      v[u] = x[((static_cast<long long>(n) * kH + h) * kW + w) * kC + c];
    }
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = threadIdx.x + u * kThreads;
    if (i < kPatch) patch[i] = Op(v[u]);
  }
}
// offset[j]: where tap j = (r, s, c) of position (0, 0) lies in the patch. Padding taps read the
// position's first tap: the forward multiplies it by a zero weight (an Inf or NaN there makes the
// output non-finite through the real tap anyway), and the weight gradient drops their columns.
NC_DEV void TapOffsets(int* offset) {
  for (int j = threadIdx.x; j < kKP; j += kThreads) {
    const int r = j / (kS * kC), s = (j / kC) % kS, c = j % kC;
    offset[j] = j < kTaps ? (r * kPatchW + s) * kC + c : 0;
  }
}
// Where position `pos` of the tile (row pos / 16, column pos % 16) starts in the patch.
NC_DEV int PositionBase(int pos) {
  return ((pos / 16) * kSH * kPatchW + (pos % 16) * kSW) * kC;
}
// Four 8 x 8 matrices of 16-bit elements (or 8 x 4 of 32-bit ones) from shared memory, one per
// register: lane l gives the address of row l % 8 of matrix l / 8 (16-byte aligned), and lane
// (g, t) receives elements (g, 2t..2t+1) of each (element (g, t) in 32 bits): an MMA fragment.
// `Trans`: the matrices transposed (16-bit elements only).
NC_DEV void LoadMatrices(unsigned (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
NC_DEV void LoadMatricesTrans(unsigned (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// The first output position of `tile`: image n, row p0, column q0.
NC_DEV void TileOrigin(int tile, int& n, int& p0, int& q0) {
  n = tile / (kTilesP * kTilesQ);
  const int rest = tile - n * (kTilesP * kTilesQ);
  p0 = (rest / kTilesQ) * kTileRows;
  q0 = (rest % kTilesQ) * 16;
}
)");
  return code;
}

}  // namespace

absl::Status NarrowConvSupports(const NarrowConvShape& s) {
  auto no = [](auto... why) { return absl::UnimplementedError(absl::StrCat(why...)); };
  if (s.dtype != DType::kFloat32 && !IsLowPrecision(s.dtype)) {
    return no("narrow convolutions take float32, bfloat16 or float16, not ", DTypeName(s.dtype));
  }
  if (s.c < 1 || s.c > kNarrowConvMaxChannels) {
    return no("narrow convolutions take 1 to ", kNarrowConvMaxChannels, " input channels, not ",
              s.c);
  }
  if (s.k < 16 || s.k > 64 || s.k % 16 != 0) {
    return no("narrow convolutions make 16, 32, 48 or 64 output channels, not ", s.k);
  }
  if (Taps(s) > 256) return no("narrow convolutions take at most 256 taps, not ", Taps(s));
  if (s.stride_h < 1 || s.stride_w < 1 || s.stride_h > 4 || s.stride_w > 4) {
    return no("narrow convolutions take strides 1 to 4, not ", s.stride_h, "x", s.stride_w);
  }
  if (s.pad_h < 0 || s.pad_w < 0 || s.pad_h >= s.r || s.pad_w >= s.s) {
    return no("narrow convolutions pad less than the kernel extent, not ", s.pad_h, "x", s.pad_w);
  }
  if (s.n < 1 || s.p < 1 || s.q < 1) return no("narrow convolution with an empty output");
  constexpr int64_t kMax = int64_t{1} << 31;
  if (s.n * s.h * s.w * s.c >= kMax || s.n * s.p * s.q * s.k >= kMax ||
      int64_t{Tiles(s, kWgradTileRows)} >= kMax) {
    return no("narrow convolutions index tensors of under 2^31 elements");
  }
  return absl::OkStatus();
}

NarrowConvLaunch NarrowConvForwardLaunch(const NarrowConvShape& s) {
  return {Tiles(s, kForwardTileRows), ForwardLayout(s).bytes};
}

NarrowConvLaunch NarrowConvWgradLaunch(const NarrowConvShape& s) {
  return {Tiles(s, kWgradTileRows), WgradLayout(s).bytes};
}

int64_t NarrowConvWgradPartialFloats(const NarrowConvShape& s, int blocks) {
  return int64_t{blocks} * s.k * PaddedTaps(s);
}

GeneratedKernel NarrowConvForward(const NarrowConvShape& s) {
  const std::string name = KernelName("reprise_narrow_conv_fwd", s);
  const SharedLayout layout = ForwardLayout(s);
  std::string code = Prologue(s, kForwardTileRows);
  absl::StrAppend(&code, "constexpr int kLdW = ", FilterPitch(s),
                  ";\nconstexpr int kPatchOffset = ", layout.patch, ", kTapOffset = ", layout.taps,
                  ";\n");
  absl::StrAppend(&code, "extern \"C\" __global__ void __launch_bounds__(kThreads, 2) ", name,
                  R"((
    const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y) {
  extern __shared__ float4 nc_shared[];
  char* const base = reinterpret_cast<char*>(nc_shared);
  op_t* const filter = reinterpret_cast<op_t*>(base);  // [kK][kLdW]
  op_t* const patch = reinterpret_cast<op_t*>(base + kPatchOffset);
  int* const offset = reinterpret_cast<int*>(base + kTapOffset);
  for (int i = threadIdx.x; i < kK * kKP; i += kThreads) {
    const int k = i / kKP, j = i - k * kKP;
    filter[k * kLdW + j] = j < kTaps ? Op(w[k * kTaps + j]) : op_t(0);
  }
  TapOffsets(offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // The filter row this lane addresses for ldmatrix: row lane % 8 of filter fragment
  // (lane / 16), in the first or second half of the reduction step (lane / 8 % 2).
  const op_t* const filter_rows =
      filter + ((lane / 16) * 8 + lane % 8) * kLdW + (lane / 8 % 2) * (kStep / 2);
  // This warp's two fragments: tile rows 2 warp + f, columns g (fragment row g) and g + 8.
  int at[2][2];
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    at[f][0] = PositionBase((2 * warp + f) * 16 + g);
    at[f][1] = PositionBase((2 * warp + f) * 16 + g + 8);
  }
  for (int tile = blockIdx.x; tile < kTiles; tile += gridDim.x) {
    int n, p0, q0;
    TileOrigin(tile, n, p0, q0);
    __syncthreads();  // The last tile's patch is read (and, the first time, the filter written).
    LoadPatch(patch, x, n, p0 * kSH - kPH, q0 * kSW - kPW);
    __syncthreads();
    float acc[2][kK / 8][4];
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
      for (int nf = 0; nf < kK / 8; ++nf)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[f][nf][i] = 0.0f;
#pragma unroll 2
    for (int ks = 0; ks < kKP; ks += kStep) {
      unsigned a[2][4];
      if constexpr (kStep == 8) {
        const int o0 = offset[ks + t], o1 = offset[ks + t + 4];
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          a[f][0] = patch[at[f][0] + o0];
          a[f][1] = patch[at[f][1] + o0];
          a[f][2] = patch[at[f][0] + o1];
          a[f][3] = patch[at[f][1] + o1];
        }
      } else {
        const int o0 = offset[ks + 2 * t], o1 = offset[ks + 2 * t + 1];
        const int o2 = offset[ks + 2 * t + 8], o3 = offset[ks + 2 * t + 9];
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          a[f][0] = Pack(patch[at[f][0] + o0], patch[at[f][0] + o1]);
          a[f][1] = Pack(patch[at[f][1] + o0], patch[at[f][1] + o1]);
          a[f][2] = Pack(patch[at[f][0] + o2], patch[at[f][0] + o3]);
          a[f][3] = Pack(patch[at[f][1] + o2], patch[at[f][1] + o3]);
        }
      }
      // Two fragments of filter columns per ldmatrix: matrices (nf, first half of the step),
      // (nf, second half), (nf + 1, first), (nf + 1, second).
#pragma unroll
      for (int nf = 0; nf < kK / 8; nf += 2) {
        unsigned b[4];
        LoadMatrices(b, filter_rows + nf * 8 * kLdW + ks);
        const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        Mma(acc[0][nf], a[0], b0);
        Mma(acc[1][nf], a[1], b0);
        Mma(acc[0][nf + 1], a[0], b1);
        Mma(acc[1][nf + 1], a[1], b1);
      }
    }
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const int p = p0 + 2 * warp + f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int q = q0 + g + 8 * half;
        if (p >= kP || q >= kQ) continue;
        elem_t* out = y + ((static_cast<long long>(n) * kP + p) * kQ + q) * kK + 2 * t;
#pragma unroll
        for (int nf = 0; nf < kK / 8; ++nf) {
          StorePair(out + nf * 8, acc[f][nf][2 * half], acc[f][nf][2 * half + 1]);
        }
      }
    }
  }
}
)");
  return {name, std::move(code)};
}

GeneratedKernel NarrowConvWgrad(const NarrowConvShape& s) {
  const std::string name = KernelName("reprise_narrow_conv_wgrad", s);
  const SharedLayout layout = WgradLayout(s);
  std::string code = Prologue(s, kWgradTileRows);
  absl::StrAppend(
      &code, "constexpr int kLdG = ", GradientPitch(s),
      ";\nconstexpr int kPatchOffset = ", layout.patch, ", kTapOffset = ", layout.taps,
      ";\n// Each warp's fragments of taps: nf = warp + 8 i.\nconstexpr int kTapFrags = "
      "kKP / 8, kFragsPerWarp = (kTapFrags + 7) / 8;\n");
  absl::StrAppend(&code, "extern \"C\" __global__ void __launch_bounds__(kThreads, 2) ", name,
                  R"((
    const elem_t* __restrict__ x, const elem_t* __restrict__ dy, float* __restrict__ partial) {
  extern __shared__ float4 nc_shared[];
  char* const base = reinterpret_cast<char*>(nc_shared);
  op_t* const grad = reinterpret_cast<op_t*>(base);  // [kTilePositions][kLdG]
  op_t* const patch = reinterpret_cast<op_t*>(base + kPatchOffset);
  int* const offset = reinterpret_cast<int*>(base + kTapOffset);
  TapOffsets(offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float acc[kK / 16][kFragsPerWarp][4];
#pragma unroll
  for (int mf = 0; mf < kK / 16; ++mf)
#pragma unroll
    for (int i = 0; i < kFragsPerWarp; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mf][i][e] = 0.0f;
  for (int tile = blockIdx.x; tile < kTiles; tile += gridDim.x) {
    int n, p0, q0;
    TileOrigin(tile, n, p0, q0);
    __syncthreads();  // The last tile's operands are read.
    LoadPatch(patch, x, n, p0 * kSH - kPH, q0 * kSW - kPW);
    // The gradient tile, four channels per load; in two halves, each issuing all its loads before
    // its first store (one memory latency per half; the accumulators keep the registers busy).
    constexpr int kQuadsPerRow = kK / 4, kPer = kTilePositions * kQuadsPerRow / kThreads / 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      raw4_t v[kPer];
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int i = threadIdx.x + (half * kPer + u) * kThreads, pos = i / kQuadsPerRow;
        const int k = (i - pos * kQuadsPerRow) * 4, p = p0 + pos / 16, q = q0 + pos % 16;
        v[u] = raw4_t{};
        if (p < kP && q < kQ) {
          v[u] = *reinterpret_cast<const raw4_t*>(
              dy + ((static_cast<long long>(n) * kP + p) * kQ + q) * kK + k);
        }
      }
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int i = threadIdx.x + (half * kPer + u) * kThreads, pos = i / kQuadsPerRow;
        const int k = (i - pos * kQuadsPerRow) * 4;
#pragma unroll
        for (int e = 0; e < 4; ++e) grad[pos * kLdG + k + e] = Element(v[u], e);
      }
    }
    __syncthreads();
#pragma unroll 2
    for (int ks = 0; ks < kTilePositions; ks += kStep) {
      // A (output channel m, position): the gradient, read down its columns.
      unsigned a[kK / 16][4];
      // B (position, tap): the patch at each position's base plus the tap's offset.
      int at[4];
      if constexpr (kStep == 8) {
        const op_t* r0 = grad + (ks + t) * kLdG;
        const op_t* r1 = grad + (ks + t + 4) * kLdG;
#pragma unroll
        for (int mf = 0; mf < kK / 16; ++mf) {
          const int m = mf * 16 + g;
          a[mf][0] = r0[m];
          a[mf][1] = r0[m + 8];
          a[mf][2] = r1[m];
          a[mf][3] = r1[m + 8];
        }
        at[0] = PositionBase(ks + t);
        at[1] = PositionBase(ks + t + 4);
      } else {
        // Transposed 8 x 8 blocks of the [position][channel] tile: matrices (positions ks..,
        // channels m..), (ks.., m + 8..), (ks + 8.., m..), (ks + 8.., m + 8..).
        const op_t* rows = grad + (ks + (lane / 16) * 8 + lane % 8) * kLdG + (lane / 8 % 2) * 8;
#pragma unroll
        for (int mf = 0; mf < kK / 16; ++mf) LoadMatricesTrans(a[mf], rows + mf * 16);
        at[0] = PositionBase(ks + 2 * t);
        at[1] = PositionBase(ks + 2 * t + 1);
        at[2] = PositionBase(ks + 2 * t + 8);
        at[3] = PositionBase(ks + 2 * t + 9);
      }
#pragma unroll
      for (int i = 0; i < kFragsPerWarp; ++i) {
        const int nf = warp + 8 * i;
        if (nf >= kTapFrags) break;
        const int o = offset[nf * 8 + g];
        unsigned b[2];
        if constexpr (kStep == 8) {
          b[0] = patch[at[0] + o];
          b[1] = patch[at[1] + o];
        } else {
          b[0] = Pack(patch[at[0] + o], patch[at[1] + o]);
          b[1] = Pack(patch[at[2] + o], patch[at[3] + o]);
        }
#pragma unroll
        for (int mf = 0; mf < kK / 16; ++mf) Mma(acc[mf][i], a[mf], b);
      }
    }
  }
  float* const mine = partial + static_cast<long long>(blockIdx.x) * kK * kKP;
#pragma unroll
  for (int i = 0; i < kFragsPerWarp; ++i) {
    const int nf = warp + 8 * i;
    if (nf >= kTapFrags) break;
#pragma unroll
    for (int mf = 0; mf < kK / 16; ++mf) {
      const int m = mf * 16 + g, j = nf * 8 + 2 * t;
      *reinterpret_cast<float2*>(mine + m * kKP + j) = make_float2(acc[mf][i][0], acc[mf][i][1]);
      *reinterpret_cast<float2*>(mine + (m + 8) * kKP + j) =
          make_float2(acc[mf][i][2], acc[mf][i][3]);
    }
  }
}
)");
  return {name, std::move(code)};
}

GeneratedKernel NarrowConvWgradSum(const NarrowConvShape& s, int blocks) {
  const std::string name = KernelName("reprise_narrow_conv_wgrad_sum", s);
  std::string code = ElementTypeSource(s.dtype);
  absl::StrAppend(&code, "constexpr int kK = ", s.k, ", kTaps = ", Taps(s),
                  ", kKP = ", PaddedTaps(s), ", kBlocks = ", blocks,
                  ", kSlices = ", kNarrowConvSumSlices, ";\n");
  absl::StrAppend(&code, "extern \"C\" __global__ void __launch_bounds__(32 * kSlices) ", name,
                  R"((
    const float* __restrict__ partial, elem_t* __restrict__ dw) {
  // 32 elements of dw per block; slice s of the threads sums the partials of blocks s, s + kSlices,
  // ... in order, and the slices are added in slice order: a fixed order of additions.
  __shared__ float sums[kSlices][32];
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int i = blockIdx.x * 32 + lane;
  float sum = 0.0f;
  if (i < kK * kTaps) {
    const int k = i / kTaps, j = i - k * kTaps;
    const float* p = partial + k * kKP + j;
#pragma unroll 4
    for (int b = slice; b < kBlocks; b += kSlices) sum += p[static_cast<long long>(b) * kK * kKP];
  }
  sums[slice][lane] = sum;
  __syncthreads();
  if (slice == 0 && i < kK * kTaps) {
    float total = sums[0][lane];
#pragma unroll
    for (int s = 1; s < kSlices; ++s) total += sums[s][lane];
    dw[i] = FromFloat(total);
  }
}
)");
  return {name, std::move(code)};
}

}  // namespace reprise::codegen
