#include "src/codegen/layer_norm_backward_kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/vector16.h"

namespace reprise::codegen {
namespace {

// About this many blocks (two a multiprocessor fill a 132-SM GPU in one wave) and at least this
// many steps a block, so that the block's final sums are a small part of its work.
constexpr int64_t kTargetChunks = 256;
constexpr int64_t kMinSteps = 4;

// The kernel's body; LNB_ADD says whether dres is read. See the header for the layout.
constexpr char kBackwardBody[] = R"(
  __shared__ float2 sums[2][LNB_THREADS / 32];
  __shared__ __align__(16) float stage[LNB_THREADS * VEC];
  // The weight in shared memory rather than registers: the registers hold the next step's rows.
  __shared__ __align__(16) float weights[LNB_THREADS * VEC];
  const int slots = blockDim.x / team;
  const int slot = threadIdx.x / team, j = threadIdx.x - slot * team;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int team_warps = team / 32, first_warp = slot * team_warps;
  const int c0 = j * VEC;
  const bool active = c0 < cols;
  float dw[VEC], db[VEC];
  const float* const w = weights + c0;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (slot == 0 && active) weights[c0 + i] = weight[c0 + i];
    dw[i] = 0.0f;
    db[i] = 0.0f;
  }
  __syncthreads();
  // Row indices fit an int (the lowering's check); offsets into the tensors do not.
  const int first = blockIdx.x * (int)rows_per_chunk;
  const int end = (int)min(rows, (long long)first + rows_per_chunk);
  const int steps = (int)((rows_per_chunk + slots - 1) / slots);
  // Each step's dy and x rows are loaded one step ahead, before the step before waits on its block
  // barrier, so that a block has two steps' loads in flight instead of one (the residual
  // gradient, needed only after the barrier, is loaded at the step's start).
  vec_t d_next = ZeroVec(), v_next = ZeroVec();
  float m_next = 0.0f, r_next = 0.0f;
  auto load = [&](int step) {
    const int row = first + step * slots + slot;
    if (active && row < end) {
      const size_t at = (size_t)row * cols + c0;
      d_next = LoadVec(dy + at);
      v_next = LoadVec(x + at);
      m_next = mean[row];
      r_next = rstd[row];
    }
  };
  load(0);
  for (int step = 0; step < steps; ++step) {
    const int row = first + step * slots + slot;
    const bool live = active && row < end;
    const vec_t d = d_next, v = v_next;
#if LNB_ADD
    const vec_t e = live ? LoadVec(dres + (size_t)row * cols + c0) : ZeroVec();
#endif
    const float m = m_next, r = r_next;
    if (step + 1 < steps) load(step + 1);
    float sum_g = 0.0f, sum_gx = 0.0f;
    if (live) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float dv = VecAt(d, i), xhat = (VecAt(v, i) - m) * r, g = dv * w[i];
        sum_g += g;
        sum_gx += g * xhat;
        dw[i] += dv * xhat;
        db[i] += dv;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      sum_g += __shfl_down_sync(0xffffffffu, sum_g, offset);
      sum_gx += __shfl_down_sync(0xffffffffu, sum_gx, offset);
    }
    // Two buffers, alternating by step: a warp writes step s + 2's sums only after the barrier
    // of step s + 1, which every thread passes after reading step s's.
    if (lane == 0) sums[step & 1][warp] = make_float2(sum_g, sum_gx);
    __syncthreads();
    float total_g = 0.0f, total_gx = 0.0f;
    for (int k = 0; k < team_warps; ++k) {
      const float2 p = sums[step & 1][first_warp + k];
      total_g += p.x;
      total_gx += p.y;
    }
    if (live) {
      const float mean_g = total_g / cols, mean_gx = total_gx / cols;
      float o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        o[i] = r * (VecAt(d, i) * w[i] - mean_g - (VecAt(v, i) - m) * r * mean_gx);
#if LNB_ADD
        o[i] += VecAt(e, i);
#endif
      }
      StoreVec(dx + (size_t)row * cols + c0, o);
    }
  }
  // The block's parameter sums: its slots' in slot order, dweight then dbias through one stage.
  for (int which = 0; which < 2; ++which) {
    if (active) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) stage[slot * cols + c0 + i] = which == 0 ? dw[i] : db[i];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      float t = 0.0f;
      for (int k = 0; k < slots; ++k) t += stage[k * cols + c];
      partial[((long long)which * gridDim.x + blockIdx.x) * cols + c] = t;
    }
    __syncthreads();
  }
)";

// The warp-per-row form's body (LNW_PER vectors a lane, LNW_WARPS warps a block); LNB_ADD as
// above. See the header for the layout.
constexpr char kWarpBody[] = R"(
  __shared__ __align__(16) float weights[LNW_PER * 32 * VEC];
  __shared__ __align__(16) float stage[LNW_WARPS][LNW_PER * 32 * VEC];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) weights[c] = weight[c];
#if LNB_SUM
  // The column sums of dx as stored build up in the warp's own row of the stage (not in
  // registers, which hold the rows in flight): each lane adds to its own columns only.
  for (int c = lane; c < LNW_PER * 32 * VEC; c += 32) stage[warp][c] = 0.0f;
#endif
  __syncthreads();
  float dw[LNW_PER][VEC], db[LNW_PER][VEC];
#pragma unroll
  for (int p = 0; p < LNW_PER; ++p) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw[p][i] = db[p][i] = 0.0f;
  }
  const long long first = (long long)blockIdx.x * rows_per_chunk;
  const long long end = min(rows, first + rows_per_chunk);
  // No loads a row ahead: the registers they would take cost more warps than they hide latency
  // for. A warp's row (dy, x and dres at once) is in flight while the other warps compute.
  for (long long row = first + warp; row < end; row += LNW_WARPS) {
    const size_t base = (size_t)row * cols;
    vec_t d[LNW_PER], v[LNW_PER];
#if LNB_ADD
    vec_t e[LNW_PER];
#endif
#pragma unroll
    for (int p = 0; p < LNW_PER; ++p) {
      const int c0 = (p * 32 + lane) * VEC;
      const bool in = c0 < cols;
      d[p] = in ? LoadVec(dy + base + c0) : ZeroVec();
      v[p] = in ? LoadVec(x + base + c0) : ZeroVec();
#if LNB_ADD
      e[p] = in ? LoadVec(dres + base + c0) : ZeroVec();
#endif
    }
    const float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int p = 0; p < LNW_PER; ++p) {
      const int c0 = (p * 32 + lane) * VEC;
      if (c0 >= cols) continue;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float dv = VecAt(d[p], i), xhat = (VecAt(v[p], i) - m) * r;
        const float g = dv * weights[c0 + i];
        sum_g += g;
        sum_gx += g * xhat;
        dw[p][i] += dv * xhat;
        db[p][i] += dv;
      }
    }
    // A butterfly: every lane ends with the same bits.
    for (int offset = 16; offset > 0; offset >>= 1) {
      sum_g += __shfl_xor_sync(0xffffffffu, sum_g, offset);
      sum_gx += __shfl_xor_sync(0xffffffffu, sum_gx, offset);
    }
    const float mean_g = sum_g / cols, mean_gx = sum_gx / cols;
#pragma unroll
    for (int p = 0; p < LNW_PER; ++p) {
      const int c0 = (p * 32 + lane) * VEC;
      if (c0 >= cols) continue;
      float o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        o[i] = r * (VecAt(d[p], i) * weights[c0 + i] - mean_g - (VecAt(v[p], i) - m) * r * mean_gx);
#if LNB_ADD
        o[i] += VecAt(e[p], i);
#endif
      }
      StoreVec(dx + base + c0, o);
#if LNB_SUM
      float4* const s = reinterpret_cast<float4*>(&stage[warp][c0]);
#pragma unroll
      for (int q = 0; q < VEC / 4; ++q) {
        float4 t = s[q];
        t.x += ToFloat(FromFloat(o[4 * q]));
        t.y += ToFloat(FromFloat(o[4 * q + 1]));
        t.z += ToFloat(FromFloat(o[4 * q + 2]));
        t.w += ToFloat(FromFloat(o[4 * q + 3]));
        s[q] = t;
      }
#endif
    }
  }
#if LNB_SUM
  // The block's column sums of dx, its warps' in warp order, into partial[2].
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float t = 0.0f;
    for (int k = 0; k < LNW_WARPS; ++k) t += stage[k][c];
    partial[(2LL * gridDim.x + blockIdx.x) * cols + c] = t;
  }
  __syncthreads();
#endif
  // The block's parameter sums: its warps' in warp order, dweight then dbias through one stage.
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int p = 0; p < LNW_PER; ++p) {
      const int c0 = (p * 32 + lane) * VEC;
      if (c0 >= cols) continue;
#pragma unroll
      for (int i = 0; i < VEC; ++i) stage[warp][c0 + i] = which == 0 ? dw[p][i] : db[p][i];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      float t = 0.0f;
      for (int k = 0; k < LNW_WARPS; ++k) t += stage[k][c];
      partial[((long long)which * gridDim.x + blockIdx.x) * cols + c] = t;
    }
    __syncthreads();
  }
)";

}  // namespace

LayerNormBackwardLaunch LayerNormBackwardLaunchFor(int64_t rows, int64_t cols, DType dtype) {
  LayerNormBackwardLaunch l;
  const int64_t vec = Vector16Elements(dtype);
  // The kernel indexes rows with ints (with room past the last row for a chunk's last step).
  if (rows <= 0 || rows > INT32_MAX / 2 || cols <= 0 || cols % vec != 0) return l;
  const int64_t vectors = cols / vec;
  int64_t min_steps = kMinSteps;
  if (vectors <= 32 * kLayerNormBackwardMaxLaneVectors) {
    // A warp a row: its sums need no block barrier. Many short chunks rather than a few long ones
    // (a warp takes a row at a time), as long as the partials stay small beside the rows.
    l.team = 32;
    l.slots = kLayerNormBackwardWarps;
    l.lane_vectors = static_cast<int>((vectors + 31) / 32);
    min_steps = 1;
  } else {
    const int64_t team = (vectors + 31) / 32 * 32;
    if (team > kLayerNormBackwardThreads) return l;
    l.team = static_cast<int>(team);
    l.slots = static_cast<int>(kLayerNormBackwardThreads / team);
  }
  const int64_t steps =
      std::max(min_steps, (rows + l.slots * kTargetChunks - 1) / (l.slots * kTargetChunks));
  l.rows_per_chunk = l.slots * steps;
  l.chunks = (rows + l.rows_per_chunk - 1) / l.rows_per_chunk;
  l.partial_bytes = 2 * l.chunks * cols * static_cast<int64_t>(sizeof(float));
  return l;
}

GeneratedKernel LayerNormBackward(DType dtype, bool add) {
  return LayerNormBackwardWith(dtype, add, 0);
}

namespace {

// The backward kernel of either form, with the column sums of dx where `sum` (warp form only).
GeneratedKernel BackwardKernel(DType dtype, bool add, int lane_vectors, bool sum) {
  const bool warp = lane_vectors > 0;
  const std::string name = ElementKernelName(
      absl::StrCat("reprise_layer_norm_bwd", warp ? absl::StrCat("_w", lane_vectors) : "",
                   add ? "_add" : "", sum ? "_sum" : ""),
      dtype);
  const int threads = warp ? 32 * kLayerNormBackwardWarps : kLayerNormBackwardThreads;
  return {name,
          absl::StrCat(ElementTypeSource(dtype), Vector16Source(dtype), "#define LNB_ADD ",
                       add ? 1 : 0, "\n#define LNB_SUM ", sum ? 1 : 0, "\n#define LNB_THREADS ",
                       kLayerNormBackwardThreads, "\n#define LNW_PER ", lane_vectors,
                       "\n#define LNW_WARPS ", kLayerNormBackwardWarps, "\n",
                       "extern \"C\" __global__ void __launch_bounds__(", threads, ", 2) ", name,
                       "(const elem_t* __restrict__ dy, const elem_t* __restrict__ x, "
                       "const float* __restrict__ weight, const float* __restrict__ mean, "
                       "const float* __restrict__ rstd, ",
                       add ? "const elem_t* __restrict__ dres, " : "",
                       "elem_t* __restrict__ dx, float* __restrict__ partial, long long rows, "
                       "int cols, int team, long long rows_per_chunk) {\n",
                       warp ? kWarpBody : kBackwardBody, "}\n")};
}

// The totals' body: blockIdx.y picks the partial slab and its output (LNT_SUM: a third, dsum).
constexpr char kTotalBody[] = R"(
  __shared__ float sums[LNT_ROWS][33];
  const int c = blockIdx.x * 32 + threadIdx.x, which = blockIdx.y;
  const float* p = partial + (long long)which * chunks * cols;
  float t = 0.0f;
  if (c < cols) {
    for (int k = threadIdx.y; k < chunks; k += LNT_ROWS) t += p[(long long)k * cols + c];
  }
  sums[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int k = 0; k < LNT_ROWS; ++k) total += sums[k][threadIdx.x];
#if LNT_SUM
    if (which == 2) {
      dsum[c] = FromFloat(total);
      return;
    }
#endif
    (which == 0 ? dweight : dbias)[c] = total;
  }
}
)";

}  // namespace

GeneratedKernel LayerNormBackwardWith(DType dtype, bool add, int lane_vectors) {
  return BackwardKernel(dtype, add, lane_vectors, /*sum=*/false);
}

GeneratedKernel LayerNormBackwardWithSum(DType dtype, bool add, int lane_vectors) {
  return BackwardKernel(dtype, add, lane_vectors, /*sum=*/true);
}

GeneratedKernel LayerNormParamTotal() {
  return {"reprise_layer_norm_dparams_total",
          absl::StrCat("#define LNT_ROWS ", kLayerNormTotalRowThreads, "\n#define LNT_SUM 0\n",
                       "extern \"C\" __global__ void reprise_layer_norm_dparams_total(",
                       "const float* __restrict__ partial, int chunks, int cols, ",
                       "float* __restrict__ dweight, float* __restrict__ dbias) {", kTotalBody)};
}

GeneratedKernel LayerNormParamTotalWithSum(DType dtype) {
  const std::string name = ElementKernelName("reprise_layer_norm_dparams_total_sum", dtype);
  return {name,
          absl::StrCat(ElementTypeSource(dtype), "#define LNT_ROWS ", kLayerNormTotalRowThreads,
                       "\n#define LNT_SUM 1\n", "extern \"C\" __global__ void ", name,
                       "(const float* __restrict__ partial, int chunks, int cols, ",
                       "float* __restrict__ dweight, float* __restrict__ dbias, ",
                       "elem_t* __restrict__ dsum) {", kTotalBody)};
}

std::vector<GeneratedKernel> LayerNormBackwardKernels() {
  std::vector<GeneratedKernel> kernels = {LayerNormParamTotal()};
  for (DType dtype : kKernelElementTypes) {
    kernels.push_back(LayerNormBackward(dtype, false));
    kernels.push_back(LayerNormBackward(dtype, true));
    kernels.push_back(LayerNormParamTotalWithSum(dtype));
  }
  return kernels;
}

}  // namespace reprise::codegen
