#include "src/codegen/layer_norm_kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

// A warp's sum in a fixed tree, broadcast from lane 0 so that every lane holds the same bits.
constexpr char kWarpSum[] = R"(
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);
}
)";

GeneratedKernel Make(const char* base, DType dtype, const std::string& signature,
                     const std::string& body) {
  const std::string name = ElementKernelName(base, dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), kWarpSum, "extern \"C\" __global__ void ",
                             name, "(", signature, ") {\n", body, "}\n")};
}

// The row of warp w of the block; the whole warp leaves when past the last row.
constexpr char kRowPrologue[] = R"(
  const long long row = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
)";

}  // namespace

LayerNormChunking LayerNormChunkingFor(int64_t rows, int64_t cols) {
  // At least 32 rows per chunk (each of the block's 8 row-threads walks 4+), at most 256 chunks:
  // enough blocks to fill a GPU at GPT-2's widths, few partials to sum.
  LayerNormChunking k;
  const int64_t chunks = std::clamp<int64_t>((rows + 31) / 32, 1, 256);
  k.rows_per_chunk = (rows + chunks - 1) / chunks;
  k.chunks = (rows + k.rows_per_chunk - 1) / k.rows_per_chunk;
  k.partial_bytes = 2 * k.chunks * cols * static_cast<int64_t>(sizeof(float));
  return k;
}

namespace {

constexpr char kForwardSignature[] =
    "const elem_t* __restrict__ x, const float* __restrict__ weight, "
    "const float* __restrict__ bias, elem_t* __restrict__ y, "
    "float* __restrict__ mean_out, float* __restrict__ rstd_out, long long rows, "
    "int cols, float eps";

constexpr char kAddForwardSignature[] =
    "const elem_t* __restrict__ a, const elem_t* __restrict__ b, "
    "const float* __restrict__ weight, const float* __restrict__ bias, "
    "elem_t* __restrict__ x, elem_t* __restrict__ y, float* __restrict__ mean_out, "
    "float* __restrict__ rstd_out, long long rows, int cols, float eps";

// The forward's statistics and output once `sum` holds the row's sum of x (at xr).
constexpr char kForwardTail[] = R"(
  const float mean = WarpSum(sum) / cols;
  float squares = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    const float d = ToFloat(xr[c]) - mean;
    squares += d * d;
  }
  const float rstd = rsqrtf(WarpSum(squares) / cols + eps);
  elem_t* yr = y + row * cols;
  for (int c = lane; c < cols; c += 32) {
    yr[c] = FromFloat((ToFloat(xr[c]) - mean) * rstd * weight[c] + bias[c]);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
)";

}  // namespace

GeneratedKernel LayerNormForward(DType dtype) {
  return Make("reprise_layer_norm", dtype, kForwardSignature,
              absl::StrCat(kRowPrologue, R"(
  const elem_t* xr = x + row * cols;
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += ToFloat(xr[c]);
)",
                           kForwardTail));
}

GeneratedKernel LayerNormAddForward(DType dtype) {
  // Each lane reads back only the elements of x it wrote itself.
  return Make("reprise_add_layer_norm", dtype, kAddForwardSignature,
              absl::StrCat(kRowPrologue, R"(
  const elem_t* ar = a + row * cols;
  const elem_t* br = b + row * cols;
  elem_t* xr = x + row * cols;
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    const elem_t v = FromFloat(ToFloat(ar[c]) + ToFloat(br[c]));
    xr[c] = v;
    sum += ToFloat(v);
  }
)",
                           kForwardTail));
}

namespace {

// The vectorized row kernels: each lane walks the row four elements at a time (Load4/Store4,
// float4 of the float32 weight and bias), for rows whose width is a multiple of 4 with every
// pointer aligned to 16 bytes (LayerNormVectorizes). The sums run in another order than the
// scalar kernels' (lane l holds columns 4l..4l+3, 4l+128.. instead of l, l+32, ..): both are
// fixed by the shapes, so runs and replays still give the same bits.
constexpr char kVecLoop[] = "for (int c = 4 * lane; c < cols; c += 128)";

constexpr char kVecForwardTail[] = R"(
  const float mean = WarpSum(sum) / cols;
  float squares = 0.0f;
  for (int c = 4 * lane; c < cols; c += 128) {
    const float4 v = Load4(xr + c);
    const float a = v.x - mean, b = v.y - mean, d = v.z - mean, e = v.w - mean;
    squares += (a * a + b * b) + (d * d + e * e);
  }
  const float rstd = rsqrtf(WarpSum(squares) / cols + eps);
  elem_t* yr = y + row * cols;
  for (int c = 4 * lane; c < cols; c += 128) {
    const float4 v = Load4(xr + c);
    const float4 w = *reinterpret_cast<const float4*>(weight + c);
    const float4 b = *reinterpret_cast<const float4*>(bias + c);
    Store4(yr + c, make_float4((v.x - mean) * rstd * w.x + b.x, (v.y - mean) * rstd * w.y + b.y,
                               (v.z - mean) * rstd * w.z + b.z, (v.w - mean) * rstd * w.w + b.w));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
)";

}  // namespace

namespace {

// The vectorized forward with the row held in registers, where it fits (cols <= 128·LN_CACHE):
// every load of the row issued at once and the row read from memory once, where the loops of
// kVecForwardTail read it three times, each pass waiting for the sum before it. Each sum adds
// the same values in the same order as those loops, so both give the same bits. `load_row` fills
// v[k] with columns 4·lane + 128·k .. + 3 (their x, as stored) for every k with c < cols.
constexpr int kForwardCache = 8;  // float4s a lane holds: rows of up to 1024 columns.
std::string CachedVecForward(const std::string& load_row) {
  return absl::StrCat("#define LN_CACHE ", kForwardCache, R"(
  if (cols <= 128 * LN_CACHE) {
    float4 v[LN_CACHE];
#pragma unroll
    for (int k = 0; k < LN_CACHE; ++k) {
      const int c = 4 * lane + 128 * k;
)",
                      load_row, R"(
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LN_CACHE; ++k) {
      if (4 * lane + 128 * k < cols) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    const float mean = WarpSum(sum) / cols;
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < LN_CACHE; ++k) {
      if (4 * lane + 128 * k < cols) {
        const float a = v[k].x - mean, b = v[k].y - mean, d = v[k].z - mean, e = v[k].w - mean;
        squares += (a * a + b * b) + (d * d + e * e);
      }
    }
    const float rstd = rsqrtf(WarpSum(squares) / cols + eps);
    elem_t* yr = y + row * cols;
#pragma unroll
    for (int k = 0; k < LN_CACHE; ++k) {
      const int c = 4 * lane + 128 * k;
      if (c < cols) {
        const float4 w = *reinterpret_cast<const float4*>(weight + c);
        const float4 b = *reinterpret_cast<const float4*>(bias + c);
        Store4(yr + c, make_float4((v[k].x - mean) * rstd * w.x + b.x,
                                   (v[k].y - mean) * rstd * w.y + b.y,
                                   (v[k].z - mean) * rstd * w.z + b.z,
                                   (v[k].w - mean) * rstd * w.w + b.w));
      }
    }
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    return;
  }
)");
}

}  // namespace

GeneratedKernel LayerNormForwardVec(DType dtype) {
  return Make("reprise_layer_norm_vec", dtype, kForwardSignature,
              absl::StrCat(kRowPrologue, R"(
  const elem_t* xr = x + row * cols;
)",
                           CachedVecForward("      if (c < cols) v[k] = Load4(xr + c);"),
                           R"(  float sum = 0.0f;
  )",
                           kVecLoop, R"( {
    const float4 v = Load4(xr + c);
    sum += (v.x + v.y) + (v.z + v.w);
  }
)",
                           kVecForwardTail));
}

GeneratedKernel LayerNormAddForwardVec(DType dtype) {
  // x = a + b rounded once to elem_t; the statistics read the rounded values back from x (each
  // lane reads only what it wrote itself), or, cached, the same values rounded in registers.
  return Make("reprise_add_layer_norm_vec", dtype, kAddForwardSignature,
              absl::StrCat(kRowPrologue, R"(
  const elem_t* ar = a + row * cols;
  const elem_t* br = b + row * cols;
  elem_t* xr = x + row * cols;
)",
                           CachedVecForward(R"(      if (c < cols) {
        const float4 u = Load4(ar + c), w = Load4(br + c);
        const float4 s = make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w);
        Store4(xr + c, s);
        v[k] = make_float4(ToFloat(FromFloat(s.x)), ToFloat(FromFloat(s.y)),
                           ToFloat(FromFloat(s.z)), ToFloat(FromFloat(s.w)));
      })"),
                           R"(  float sum = 0.0f;
  )",
                           kVecLoop, R"( {
    const float4 u = Load4(ar + c), w = Load4(br + c);
    Store4(xr + c, make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w));
    const float4 v = Load4(xr + c);
    sum += (v.x + v.y) + (v.z + v.w);
  }
)",
                           kVecForwardTail));
}

namespace {

// The dx kernels' parameters (with `add`, the residual stream's other gradient dres) and their
// start of a row, shared by the scalar and the vectorized forms.
std::string DxSignature(bool add) {
  return absl::StrCat(
      "const elem_t* __restrict__ dy, const elem_t* __restrict__ x, "
      "const float* __restrict__ weight, const float* __restrict__ mean, "
      "const float* __restrict__ rstd, ",
      add ? "const elem_t* __restrict__ dres, " : "",
      "elem_t* __restrict__ dx, long long rows, int cols");
}

constexpr char kDxRowStart[] = R"(
  const elem_t* dyr = dy + row * cols;
  const elem_t* xr = x + row * cols;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;)";

// dx, four elements at a time; the arithmetic of Dx below.
GeneratedKernel DxVec(DType dtype, bool add) {
  return Make(add ? "reprise_layer_norm_dx_add_vec" : "reprise_layer_norm_dx_vec", dtype,
              DxSignature(add),
              absl::StrCat(kRowPrologue, kDxRowStart, R"(
  )",
                           kVecLoop, R"( {
    const float4 d = Load4(dyr + c), v = Load4(xr + c);
    const float4 w = *reinterpret_cast<const float4*>(weight + c);
    const float g0 = d.x * w.x, g1 = d.y * w.y, g2 = d.z * w.z, g3 = d.w * w.w;
    sum_g += (g0 + g1) + (g2 + g3);
    sum_gx += (g0 * ((v.x - m) * r) + g1 * ((v.y - m) * r)) +
              (g2 * ((v.z - m) * r) + g3 * ((v.w - m) * r));
  }
  const float mean_g = WarpSum(sum_g) / cols, mean_gx = WarpSum(sum_gx) / cols;
  elem_t* dxr = dx + row * cols;
  )",
                           kVecLoop, R"( {
    const float4 d = Load4(dyr + c), v = Load4(xr + c);
    const float4 w = *reinterpret_cast<const float4*>(weight + c);
    float4 o = make_float4(r * (d.x * w.x - mean_g - (v.x - m) * r * mean_gx),
                           r * (d.y * w.y - mean_g - (v.y - m) * r * mean_gx),
                           r * (d.z * w.z - mean_g - (v.z - m) * r * mean_gx),
                           r * (d.w * w.w - mean_g - (v.w - m) * r * mean_gx));
)",
                           add ? R"(    const float4 e = Load4(dres + row * cols + c);
    o = make_float4(o.x + e.x, o.y + e.y, o.z + e.z, o.w + e.w);
)"
                               : "",
                           "    Store4(dxr + c, o);\n  }\n"));
}

}  // namespace

GeneratedKernel LayerNormDxVec(DType dtype) { return DxVec(dtype, false); }
GeneratedKernel LayerNormDxAddVec(DType dtype) { return DxVec(dtype, true); }

bool LayerNormVectorizes(int64_t cols, absl::Span<const void* const> pointers) {
  if (cols % 4 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

namespace {

// dx per row; with `add`, dx = that + dres (the residual stream's other gradient), one rounding.
GeneratedKernel Dx(DType dtype, bool add) {
  return Make(add ? "reprise_layer_norm_dx_add" : "reprise_layer_norm_dx", dtype, DxSignature(add),
              absl::StrCat(kRowPrologue, kDxRowStart, R"(
  for (int c = lane; c < cols; c += 32) {
    const float g = ToFloat(dyr[c]) * weight[c];
    sum_g += g;
    sum_gx += g * ((ToFloat(xr[c]) - m) * r);
  }
  const float mean_g = WarpSum(sum_g) / cols, mean_gx = WarpSum(sum_gx) / cols;
  elem_t* dxr = dx + row * cols;
  for (int c = lane; c < cols; c += 32) {
    const float g = ToFloat(dyr[c]) * weight[c];
    const float xhat = (ToFloat(xr[c]) - m) * r;
    const float d = r * (g - mean_g - xhat * mean_gx);
)",
                           add ? "    dxr[c] = FromFloat(d + ToFloat(dres[row * cols + c]));\n"
                               : "    dxr[c] = FromFloat(d);\n",
                           "  }\n"));
}

}  // namespace

GeneratedKernel LayerNormDx(DType dtype) { return Dx(dtype, false); }
GeneratedKernel LayerNormDxAdd(DType dtype) { return Dx(dtype, true); }

GeneratedKernel LayerNormParamPartials(DType dtype) {
  return Make("reprise_layer_norm_dparams_partial", dtype,
              "const elem_t* __restrict__ dy, const elem_t* __restrict__ x, "
              "const float* __restrict__ mean, const float* __restrict__ rstd, "
              "float* __restrict__ partial, long long rows, int cols, long long rows_per_chunk",
              R"(
  __shared__ float sum_w[8][33], sum_b[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const long long first = blockIdx.y * rows_per_chunk;
  const long long end = min(rows, first + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  if (c < cols) {
    for (long long r = first + threadIdx.y; r < end; r += 8) {
      const float g = ToFloat(dy[r * cols + c]);
      dw += g * ((ToFloat(x[r * cols + c]) - mean[r]) * rstd[r]);
      db += g;
    }
  }
  sum_w[threadIdx.y][threadIdx.x] = dw;
  sum_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float tw = 0.0f, tb = 0.0f;
    for (int s = 0; s < 8; ++s) {
      tw += sum_w[s][threadIdx.x];
      tb += sum_b[s][threadIdx.x];
    }
    partial[(long long)blockIdx.y * cols + c] = tw;
    partial[((long long)gridDim.y + blockIdx.y) * cols + c] = tb;
  }
)");
}

GeneratedKernel LayerNormParamFinalize() {
  return {"reprise_layer_norm_dparams_finalize", R"(
extern "C" __global__ void reprise_layer_norm_dparams_finalize(const float* __restrict__ partial,
                                                               int chunks, int cols,
                                                               float* __restrict__ dweight,
                                                               float* __restrict__ dbias) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float tw = 0.0f, tb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    tw += partial[(long long)k * cols + c];
    tb += partial[(long long)(chunks + k) * cols + c];
  }
  dweight[c] = tw;
  dbias[c] = tb;
}
)"};
}

std::vector<GeneratedKernel> LayerNormKernels() {
  std::vector<GeneratedKernel> kernels = {LayerNormParamFinalize()};
  for (DType dtype : kKernelElementTypes) {
    for (GeneratedKernel (*make)(DType) :
         {LayerNormForward, LayerNormAddForward, LayerNormDx, LayerNormDxAdd,
          LayerNormParamPartials, LayerNormForwardVec, LayerNormAddForwardVec, LayerNormDxVec,
          LayerNormDxAddVec}) {
      kernels.push_back(make(dtype));
    }
  }
  return kernels;
}

}  // namespace reprise::codegen
