#include "src/codegen/wgrad3x3_kernels.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace reprise::codegen {
namespace {

constexpr int kTile = 64;           // k and c per block.
constexpr int kDyPitch = 72;        // Shared-memory row pitches in floats: conflict-free fragment
constexpr int kInputPitch = 72;     // reads (8 t + g covers the 32 banks).
constexpr int kTargetBlocks = 264;  // Two waves on an H100's 132 multiprocessors: a constant, so
                                    // the split (and the bits) do not depend on the device.

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int PaddedWidth(const Wgrad3x3Shape& s) { return static_cast<int>(CeilDiv(s.w, 8) * 8); }

// The constants of one shape, as the kernels see them.
std::string Constants(const Wgrad3x3Shape& s, const Wgrad3x3Launch& l) {
  const int wp = PaddedWidth(s);
  return absl::StrCat("constexpr int kN = ", s.n, ", kH = ", s.h, ", kW = ", s.w, ", kC = ", s.c,
                      ", kK = ", s.k, ";\nconstexpr int kWp = ", wp, ", kAp = ", wp + 2,
                      ", kRows = ", l.rows_per_stage, ", kRowsPerSplit = ", l.rows_per_split,
                      ", kSplits = ", l.splits, ";\nconstexpr int kDyPitch = ", kDyPitch,
                      ", kInputPitch = ", kInputPitch, ", kTile = ", kTile,
                      ", kThreads = ", kWgrad3x3Threads,
                      ";\nconstexpr int kKTiles = kK / kTile, kCTiles = kC / kTile, "
                      "kTiles = kKTiles * kCTiles * 3;\n");
}

// Each kernel is its own source: the store compiles one module per (source, name), and the sum
// should not pay for compiling the MMA kernel a second time.
constexpr const char* kPartialsBody = R"(
#define WG_DEV __device__ __forceinline__
constexpr int kOutRows = kN * kH;  // Output rows (stride 1, pad 1: as many as input rows).

WG_DEV void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
WG_DEV void Mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Block (k tile, c tile, filter row r, split). Shared memory: dy rows [2][kRows][kWp][kDyPitch],
// then input rows [2][kRows][kAp][kInputPitch], input column w at index w + 1 (zeros around).
// One block per SM: at two, ptxas capped the kernel at 128 registers and spilled, and two such
// blocks took an SM's whole register file, so the data-gradient lane's kernels could not run
// beside them. At one it takes 152 registers without spills and leaves room; inside ResNet-50's
// step (b64, TF32, H200, docs/results/history/2026-11-29_1389a89.md) that made the step 17.43 ms
// instead of 17.53 (cuDNN's: 17.23), the blocks running in two waves.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    reprise_wgrad3x3_tf32(const float* __restrict__ x, const float* __restrict__ dy,
                          float* __restrict__ partial) {
  extern __shared__ float smem[];
  float* dy_s = smem;
  float* in_s = smem + 2 * kRows * kWp * kDyPitch;
  int b = blockIdx.x;
  const int k0 = (b % kKTiles) * kTile;
  b /= kKTiles;
  const int c0 = (b % kCTiles) * kTile;
  b /= kCTiles;
  const int r = b % 3;
  const int row_begin = (b / 3) * kRowsPerSplit;
  const int row_end = min(kOutRows, row_begin + kRowsPerSplit);
  for (int i = threadIdx.x; i < 2 * kRows * (kWp * kDyPitch + kAp * kInputPitch); i += kThreads)
    smem[i] = 0.0f;
  __syncthreads();

  // Output row `row` adds to this block when it lies in the split and reads an input row.
  auto input_row = [&](int row) { return row % kH + r - 1; };
  auto live = [&](int row) {
    const int h = input_row(row);
    return row < row_end && h >= 0 && h < kH;
  };
  // dy rows by cp.async, zeros for rows that add nothing: kW positions of 16 chunks of 16 bytes.
  auto load_dy = [&](int row, int buf) {
    float* dst = dy_s + buf * kRows * kWp * kDyPitch;
    for (int i = threadIdx.x; i < kRows * kW * 16; i += kThreads) {
      const int rr = i / (kW * 16), q = (i / 16) % kW, j = i % 16;
      float* d = dst + (rr * kWp + q) * kDyPitch + j * 4;
      if (live(row + rr)) {
        CpAsync16(d, dy + (static_cast<long long>(row + rr) * kW + q) * kK + k0 + j * 4);
      } else {
        *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  // Input rows through registers.
  constexpr int kVecs = (kRows * kW * 16 + kThreads - 1) / kThreads;
  float4 in_regs[kVecs];
  auto fetch_input = [&](int row) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int i = threadIdx.x + v * kThreads;
      const int rr = i / (kW * 16), w = (i / 16) % kW, j = i % 16;
      in_regs[v] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < kRows * kW * 16 && live(row + rr)) {
        const long long n = (row + rr) / kH;
        in_regs[v] = __ldg(reinterpret_cast<const float4*>(
                               x + ((n * kH + input_row(row + rr)) * kW + w) * kC + c0) +
                           j);
      }
    }
  };
  auto store_input = [&](int buf) {
    float* dst = in_s + buf * kRows * kAp * kInputPitch;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int i = threadIdx.x + v * kThreads;
      if (i < kRows * kW * 16) {
        const int rr = i / (kW * 16), w = (i / 16) % kW, j = i % 16;
        *reinterpret_cast<float4*>(dst + (rr * kAp + w + 1) * kInputPitch + j * 4) = in_regs[v];
      }
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;  // 2 warps along k (32 each), 4 along (s, c) (48 each).
  const int g = lane / 4, t = lane % 4;
  float acc[2][6][4] = {};
  int row = row_begin, buf = 0;
  if (row < row_end) {
    load_dy(row, 0);
    fetch_input(row);
    store_input(0);
    asm volatile("cp.async.wait_all;\n" ::);
  }
  __syncthreads();
  while (row < row_end) {
    const int next = row + kRows;
    if (next < row_end) {
      load_dy(next, buf ^ 1);
      fetch_input(next);
    }
    const float* dyb = dy_s + buf * kRows * kWp * kDyPitch;
    const float* inb = in_s + buf * kRows * kAp * kInputPitch;
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
#pragma unroll
      for (int q0 = 0; q0 < kWp; q0 += 8) {
        const float* dq = dyb + (rr * kWp + q0) * kDyPitch;
        const float* iq = inb + (rr * kAp + q0) * kInputPitch;
        unsigned af[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int m = wm * 32 + mi * 16 + g;
          af[mi][0] = __float_as_uint(dq[t * kDyPitch + m]);
          af[mi][1] = __float_as_uint(dq[t * kDyPitch + m + 8]);
          af[mi][2] = __float_as_uint(dq[(t + 4) * kDyPitch + m]);
          af[mi][3] = __float_as_uint(dq[(t + 4) * kDyPitch + m + 8]);
        }
#pragma unroll
        for (int ni = 0; ni < 6; ++ni) {
          const int n = wn * 48 + ni * 8 + g;  // (s, c) = (n / 64, n % 64)
          const int s = n / 64, c = n % 64;
          // Output position q reads input column q + s - 1, stored at index q + s.
          const unsigned bf[2] = {__float_as_uint(iq[(t + s) * kInputPitch + c]),
                                  __float_as_uint(iq[(t + 4 + s) * kInputPitch + c])};
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) Mma(acc[mi][ni], af[mi], bf);
        }
      }
    }
    if (next < row_end) store_input(buf ^ 1);
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    buf ^= 1;
    row = next;
  }
  float* out = partial + static_cast<long long>(blockIdx.x) * kTile * 192;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 6; ++ni) {
      const int m = wm * 32 + mi * 16 + g, n = wn * 48 + ni * 8 + 2 * t;
      out[m * 192 + n] = acc[mi][ni][0];
      out[m * 192 + n + 1] = acc[mi][ni][1];
      out[(m + 8) * 192 + n] = acc[mi][ni][2];
      out[(m + 8) * 192 + n + 1] = acc[mi][ni][3];
    }
  }
}
)";

constexpr const char* kSumBody = R"(
// dw[k][r][s][c]: the partials of block (k tile, c tile, r, split) in split order.
extern "C" __global__ void reprise_wgrad3x3_sum(const float* __restrict__ partial,
                                                float* __restrict__ dw) {
  constexpr int kTotal = kK * 9 * kC;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kTotal; i += gridDim.x * blockDim.x) {
    const int c = i % kC, s = (i / kC) % 3, r = (i / (3 * kC)) % 3, k = i / (9 * kC);
    const int tile = k / kTile + kKTiles * (c / kTile + kCTiles * r);
    const int at = (k % kTile) * 192 + s * kTile + c % kTile;
    float sum = 0.0f;
    for (int split = 0; split < kSplits; ++split) {
      sum += partial[(static_cast<long long>(split) * kTiles + tile) * kTile * 192 + at];
    }
    dw[i] = sum;
  }
}
)";

}  // namespace

absl::Status Wgrad3x3Supports(const Wgrad3x3Shape& s) {
  auto no = [](auto... why) { return absl::UnimplementedError(absl::StrCat(why...)); };
  if (s.n < 1 || s.h < 1) return no("a 3x3 weight gradient needs a non-empty image");
  if (s.c % kTile != 0 || s.k % kTile != 0) {
    return no("our 3x3 weight gradients take channel counts that are multiples of ", kTile,
              ", got ", s.c, " in and ", s.k, " out");
  }
  if (s.w < 28 || s.w > 64) {
    return no("our 3x3 weight gradients take images 28 to 64 wide, got ", s.w);
  }
  constexpr int64_t kMost = int64_t{1} << 31;
  if (s.n * s.h * s.w * std::max(s.c, s.k) >= kMost) {
    return no("our 3x3 weight gradients index tensors of under 2^31 elements");
  }
  return absl::OkStatus();
}

Wgrad3x3Launch Wgrad3x3LaunchFor(const Wgrad3x3Shape& s) {
  Wgrad3x3Launch l;
  const int wp = PaddedWidth(s);
  l.rows_per_stage = std::max(1, 64 / wp);  // About 64 positions a stage.
  const int64_t rows = s.n * s.h;
  const int64_t tiles = (s.k / kTile) * (s.c / kTile) * 3;
  const int64_t splits = std::clamp<int64_t>(CeilDiv(kTargetBlocks, tiles), 1,
                                             std::max<int64_t>(1, rows / l.rows_per_stage));
  l.rows_per_split =
      static_cast<int>(CeilDiv(CeilDiv(rows, splits), l.rows_per_stage) * l.rows_per_stage);
  l.splits = static_cast<int>(CeilDiv(rows, l.rows_per_split));
  l.blocks = static_cast<int>(tiles * l.splits);
  l.shared_bytes = static_cast<int64_t>(sizeof(float)) * 2 * l.rows_per_stage *
                   (wp * kDyPitch + (wp + 2) * kInputPitch);
  l.partial_floats = int64_t{l.blocks} * kTile * 192;
  return l;
}

GeneratedKernel Wgrad3x3Tf32(const Wgrad3x3Shape& s) {
  return {"reprise_wgrad3x3_tf32", absl::StrCat(Constants(s, Wgrad3x3LaunchFor(s)), kPartialsBody)};
}

GeneratedKernel Wgrad3x3Sum(const Wgrad3x3Shape& s) {
  return {"reprise_wgrad3x3_sum", absl::StrCat(Constants(s, Wgrad3x3LaunchFor(s)), kSumBody)};
}

}  // namespace reprise::codegen
