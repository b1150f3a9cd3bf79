#include "src/codegen/layer_norm_kernels.h"

#include <algorithm>
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

GeneratedKernel LayerNormForward(DType dtype) {
  return Make("reprise_layer_norm", dtype,
              "const elem_t* __restrict__ x, const float* __restrict__ weight, "
              "const float* __restrict__ bias, elem_t* __restrict__ y, "
              "float* __restrict__ mean_out, float* __restrict__ rstd_out, long long rows, "
              "int cols, float eps",
              absl::StrCat(kRowPrologue, R"(
  const elem_t* xr = x + row * cols;
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += ToFloat(xr[c]);
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
)"));
}

namespace {

// dx per row; with `add`, dx = that + dres (the residual stream's other gradient), one rounding.
GeneratedKernel Dx(DType dtype, bool add) {
  return Make(add ? "reprise_layer_norm_dx_add" : "reprise_layer_norm_dx", dtype,
              absl::StrCat("const elem_t* __restrict__ dy, const elem_t* __restrict__ x, "
                           "const float* __restrict__ weight, const float* __restrict__ mean, "
                           "const float* __restrict__ rstd, ",
                           add ? "const elem_t* __restrict__ dres, " : "",
                           "elem_t* __restrict__ dx, long long rows, int cols"),
              absl::StrCat(kRowPrologue, R"(
  const elem_t* dyr = dy + row * cols;
  const elem_t* xr = x + row * cols;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
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
         {LayerNormForward, LayerNormDx, LayerNormDxAdd, LayerNormParamPartials}) {
      kernels.push_back(make(dtype));
    }
  }
  return kernels;
}

}  // namespace reprise::codegen
