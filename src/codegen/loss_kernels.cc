#include "src/codegen/loss_kernels.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/vector16.h"

namespace reprise::codegen {
namespace {

// The row statistics. Each thread keeps (m, s) with s = Σ exp(x - m) over its elements, m
// starting at -FLT_MAX rather than -inf so that a -inf logit adds exp(-inf) = 0 instead of the
// NaN of -inf - -inf; a NaN logit makes s NaN (fmaxf passes NaN over, the sum does not).
// Elements come four at a time where the row is aligned: one rescale per four, not per element.
// The threads' pairs combine in a fixed tree (warp shuffles down, then the warps in order), so
// every lane ends with the same bits on every run.
constexpr char kRowStatistics[] = R"(
#define XENT_LOWEST (-3.402823466e+38f)
__device__ __forceinline__ void XentAddOne(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}
__device__ __forceinline__ void XentAddFour(float& m, float& s, float4 v) {
  const float top = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
  if (top > m) {
    s *= expf(m - top);
    m = top;
  }
  s += expf(v.x - m);
  s += expf(v.y - m);
  s += expf(v.z - m);
  s += expf(v.w - m);
}
__device__ __forceinline__ void XentCombine(float& m, float& s, float m2, float s2) {
  const float top = fmaxf(m, m2);
  s = s * expf(m - top) + s2 * expf(m2 - top);
  m = top;
}
// The row [first, first + cols) of z split into a head before the first 4-element boundary, a
// body of aligned quads and a tail.
struct XentSplit {
  int head, quads;
};
__device__ __forceinline__ XentSplit XentSplitRow(long long first, int cols) {
  XentSplit split;
  split.head = min(cols, (int)((4 - (first & 3)) & 3));
  split.quads = (cols - split.head) / 4;
  return split;
}
// Combines every thread's (m, s) into the row's, returned in every thread of the block.
__device__ void XentBlockCombine(float m, float s, float& m_out, float& s_out) {
  __shared__ float warp_m[32], warp_s[32], row_m, row_s;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_down_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_down_sync(0xffffffffu, s, offset);
    XentCombine(m, s, m2, s2);
  }
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? warp_m[lane] : XENT_LOWEST;
    s = lane < warps ? warp_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float m2 = __shfl_down_sync(0xffffffffu, m, offset);
      const float s2 = __shfl_down_sync(0xffffffffu, s, offset);
      XentCombine(m, s, m2, s2);
    }
    if (lane == 0) {
      row_m = m;
      row_s = s;
    }
  }
  __syncthreads();
  m_out = row_m;
  s_out = row_s;
}
// (m, s) of the whole row in every thread of the block.
__device__ void XentRowStatistics(const elem_t* __restrict__ zr, int cols, XentSplit split,
                                  float& m_out, float& s_out) {
  float m = XENT_LOWEST, s = 0.0f;
  const int t = threadIdx.x;
  if (t < split.head) XentAddOne(m, s, ToFloat(zr[t]));
  const elem_t* body = zr + split.head;
  for (int q = t; q < split.quads; q += blockDim.x) XentAddFour(m, s, Load4(body + 4 * q));
  for (int c = split.head + 4 * split.quads + t; c < cols; c += blockDim.x) {
    XentAddOne(m, s, ToFloat(zr[c]));
  }
  XentBlockCombine(m, s, m_out, s_out);
}
// The gradient at column c: exactly 0 for a padding column (c >= classes).
__device__ __forceinline__ float XentGradient(float x, float m, float inv_s, float scale, int c,
                                              int label, int classes) {
  return c < classes ? scale * (expf(x - m) * inv_s - (c == label ? 1.0f : 0.0f)) : 0.0f;
}
)";

constexpr char kRowKernelBody[] = R"(
  const int r = blockIdx.x;
  const long long first = (long long)r * cols;
  const elem_t* zr = z + first;
  const XentSplit split = XentSplitRow(first, cols);
  float m, s;
  XentRowStatistics(zr, classes, XentSplitRow(first, classes), m, s);
  const int label = labels[r];
#if XENT_LOSS
  if (threadIdx.x == 0) {
    row_loss[r] = (label >= 0 && label < classes) ? logf(s) + m - ToFloat(zr[label])
                                               : __int_as_float(0x7fc00000);
  }
#endif
#if XENT_GRAD
  const float scale = dloss[(r / rows) * dloss_stride] / rows, inv_s = 1.0f / s;
  elem_t* dzr = dz + first;
  const int t = threadIdx.x;
  if (t < split.head) dzr[t] = FromFloat(XentGradient(ToFloat(zr[t]), m, inv_s, scale, t, label, classes));
  const elem_t* body = zr + split.head;
  elem_t* dbody = dzr + split.head;
  for (int q = t; q < split.quads; q += blockDim.x) {
    const float4 v = Load4(body + 4 * q);
    const int c = split.head + 4 * q;
    Store4(dbody + 4 * q, make_float4(XentGradient(v.x, m, inv_s, scale, c, label, classes),
                                      XentGradient(v.y, m, inv_s, scale, c + 1, label, classes),
                                      XentGradient(v.z, m, inv_s, scale, c + 2, label, classes),
                                      XentGradient(v.w, m, inv_s, scale, c + 3, label, classes)));
  }
  for (int c = split.head + 4 * split.quads + t; c < cols; c += blockDim.x) {
    dzr[c] = FromFloat(XentGradient(ToFloat(zr[c]), m, inv_s, scale, c, label, classes));
  }
#endif
)";

// The one-pass row (see XentRowsOnePass in the header). XENT_COLS is the row's width, fixed in
// the source: each width gets its own function, whose dynamic shared memory limit is its own.
constexpr char kOnePassBody[] = R"(
  extern __shared__ __align__(16) unsigned char xent_row[];
  const int r = blockIdx.x, t = threadIdx.x;
  const int label = labels[r];
  const long long first = (long long)r * XENT_COLS;
  const elem_t* zr = z + first;
  constexpr int kVectors = XENT_COLS / VEC;
  const vec_t* row = reinterpret_cast<const vec_t*>(xent_row);
  {
    unsigned int base;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
        : "=r"(base) : "l"(xent_row));
    for (int q = t; q < kVectors; q += XENT_THREADS) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                   :: "r"(base + 16u * q), "l"(zr + (long long)q * VEC) : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
  }
  __syncthreads();
  float m = XENT_LOWEST, s = 0.0f;
#pragma unroll 4
  for (int q = t; q < kVectors; q += XENT_THREADS) {
    const vec_t v = row[q];
    const int c = q * VEC;
    if (c + VEC <= classes) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) m = fmaxf(m, VecAt(v, i));
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (c + i < classes) m = fmaxf(m, VecAt(v, i));
      }
    }
  }
#pragma unroll 4
  for (int q = t; q < kVectors; q += XENT_THREADS) {
    const vec_t v = row[q];
    const int c = q * VEC;
    if (c + VEC <= classes) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) s += XentExp(VecAt(v, i) - m);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (c + i < classes) s += XentExp(VecAt(v, i) - m);
      }
    }
  }
  XentBlockCombine(m, s, m, s);
#if XENT_LOSS
  if (t == 0) {
    row_loss[r] = (label >= 0 && label < classes)
                      ? logf(s) + m - ToFloat(reinterpret_cast<const elem_t*>(xent_row)[label])
                      : __int_as_float(0x7fc00000);
  }
#endif
#if XENT_GRAD
  // dz = scale·(p - [c == label]) as p·(scale / s) - scale at the label; 0 past the classes.
  const float scale = dloss[(r / rows) * dloss_stride] / rows, coef = scale / s;
  elem_t* dzr = dz + first;
#pragma unroll 4
  for (int q = t; q < kVectors; q += XENT_THREADS) {
    const vec_t v = row[q];
    const int c = q * VEC;
    float g[VEC];
    if (c + VEC <= classes) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) g[i] = XentExp(VecAt(v, i) - m) * coef;
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) g[i] = c + i < classes ? XentExp(VecAt(v, i) - m) * coef : 0.0f;
    }
    if ((unsigned int)(label - c) < (unsigned int)VEC) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (c + i == label) g[i] -= scale;
      }
    }
    StoreVec(dzr + c, g);
  }
#endif
)";

// exp(d) for d <= 0 as the hardware's base-2 exponential of d·log2(e): two instructions against
// expf's eight, a relative error of a few 1e-7 where a term matters (|d| < 20); a NaN stays NaN,
// -inf gives 0, and results below 2^-126 flush to 0.
constexpr char kFastExp[] = R"(
__device__ __forceinline__ float XentExp(float d) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d * 1.4426950408889634f));
  return y;
}
)";

// `units` threads in whole warps, from one warp to `most`.
int WarpsFor(int64_t units, int most) {
  return static_cast<int>(std::clamp<int64_t>((units + 31) / 32 * 32, 32, most));
}

}  // namespace

int XentRowThreads(int64_t cols) { return WarpsFor((cols + 3) / 4, kXentRowThreads); }

int XentOnePassThreads(int64_t cols, DType dtype) {
  return WarpsFor(cols / Vector16Elements(dtype), kXentOnePassThreads);
}

bool UseRowPerBlockLoss(int64_t rows, int64_t cols, DType dtype) {
  return IsLowPrecision(dtype) || cols >= 1024 || rows > kOneBlockLossMaxRows;
}

GeneratedKernel XentRows(DType dtype, XentOutputs outputs) {
  const bool loss = outputs != XentOutputs::kGradient;
  const bool grad = outputs != XentOutputs::kLoss;
  const char* suffix = !grad ? "_loss" : !loss ? "_grad" : "_loss_grad";
  const std::string name = ElementKernelName(absl::StrCat("reprise_xent_rows", suffix), dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "#define XENT_LOSS ", loss ? 1 : 0,
                             "\n#define XENT_GRAD ", grad ? 1 : 0, "\n", kRowStatistics,
                             "extern \"C\" __global__ void __launch_bounds__(", kXentRowThreads,
                             ") ", name,
                             "(const elem_t* __restrict__ z, const int* __restrict__ labels, "
                             "const float* __restrict__ dloss, float* __restrict__ row_loss, "
                             "elem_t* __restrict__ dz, int rows, int cols, int classes, "
                             "int dloss_stride) {\n"
                             "  (void)dloss; (void)row_loss; (void)dz; (void)dloss_stride;\n",
                             kRowKernelBody, "}\n")};
}

bool XentOnePassApplies(int64_t cols, DType dtype, absl::Span<const void* const> pointers) {
  return IsKernelElementType(dtype) && cols > 0 && cols % Vector16Elements(dtype) == 0 &&
         cols * ElementBytes(dtype) <= kXentOnePassMaxRowBytes && Aligned16(pointers);
}

GeneratedKernel XentRowsOnePass(DType dtype, XentOutputs outputs, int64_t cols) {
  const bool loss = outputs != XentOutputs::kGradient;
  const bool grad = outputs != XentOutputs::kLoss;
  const char* suffix = !grad ? "_loss" : !loss ? "_grad" : "_loss_grad";
  const std::string name = ElementKernelName(absl::StrCat("reprise_xent_onepass", suffix), dtype);
  const int threads = XentOnePassThreads(cols, dtype);
  return {name, absl::StrCat(
                    ElementTypeSource(dtype), Vector16Source(dtype), "#define XENT_LOSS ",
                    loss ? 1 : 0, "\n#define XENT_GRAD ", grad ? 1 : 0, "\n#define XENT_THREADS ",
                    threads, "\n#define XENT_COLS ", cols, "\n", kRowStatistics, kFastExp,
                    "extern \"C\" __global__ void __launch_bounds__(", threads, ", 2) ", name,
                    "(const elem_t* __restrict__ z, const int* __restrict__ labels, "
                    "const float* __restrict__ dloss, float* __restrict__ row_loss, "
                    "elem_t* __restrict__ dz, int rows, int cols, int classes, "
                    "int dloss_stride) {\n"
                    "  (void)dloss; (void)row_loss; (void)dz; (void)cols; "
                    "(void)dloss_stride;\n",
                    kOnePassBody, "}\n")};
}

GeneratedKernel XentMean() {
  return {"reprise_xent_mean", absl::StrCat("#define XENT_MEAN_THREADS ", kXentMeanThreads, R"(
extern "C" __global__ void reprise_xent_mean(const float* __restrict__ row_loss,
                                             float* __restrict__ loss, int rows) {
  __shared__ float partial[XENT_MEAN_THREADS];
  const int t = threadIdx.x;
  const float* model_loss = row_loss + (long long)blockIdx.x * rows;
  float sum = 0.0f;
  for (int r = t; r < rows; r += XENT_MEAN_THREADS) sum += model_loss[r];
  partial[t] = sum;
  __syncthreads();
  for (int width = XENT_MEAN_THREADS / 2; width > 0; width /= 2) {
    if (t < width) partial[t] += partial[t + width];
    __syncthreads();
  }
  if (t == 0) loss[blockIdx.x] = partial[0] / rows;
}
)")};
}

std::vector<GeneratedKernel> LossKernels() {
  std::vector<GeneratedKernel> kernels = {XentMean()};
  for (DType dtype : kKernelElementTypes) {
    for (XentOutputs outputs :
         {XentOutputs::kLoss, XentOutputs::kGradient, XentOutputs::kLossAndGradient}) {
      kernels.push_back(XentRows(dtype, outputs));
      kernels.push_back(XentRowsOnePass(dtype, outputs, 50304));
    }
  }
  return kernels;
}

}  // namespace reprise::codegen
