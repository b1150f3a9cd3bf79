#include "src/codegen/pooling_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/pooling_source.h"

namespace reprise::codegen::pooling_source {

// Index helpers of dense image tensors, shared by the pooling kernels.
const char kImageIndexing[] = R"(
template <typename I>
__device__ __forceinline__ I ImageOffset(I b, I ch, I r, I q, I c, I h, I w, int channels_last) {
  return channels_last ? ((b * h + r) * w + q) * c + ch : ((b * c + ch) * h + r) * w + q;
}
template <typename I>
__device__ __forceinline__ void ImageCoords(I i, I c, I h, I w, int channels_last, I& b, I& ch,
                                            I& r, I& q) {
  if (channels_last) {
    ch = i % c; i /= c; q = i % w; i /= w; r = i % h; b = i / h;
  } else {
    q = i % w; i /= w; r = i % h; i /= h; ch = i % c; b = i / c;
  }
}
// Group i of four channels of a channels-last [n, h, w, c] tensor: its image, row, column and
// first channel.
template <typename I>
__device__ __forceinline__ void GroupCoords(I i, I c, I h, I w, I& b, I& r, I& q, I& ch) {
  const I groups = c / 4;
  ch = (i % groups) * 4;
  i /= groups;
  q = i % w;
  i /= w;
  r = i % h;
  b = i / h;
}
// The windows [r0, r1] x [q0, q1] that cover input element (ih, iw): window (r, q) covers rows
// r·sh - ph .. r·sh - ph + kh - 1, and likewise for columns.
template <typename I>
__device__ __forceinline__ void CoveringWindows(I ih, I iw, I oh, I ow, int kh, int kw, int sh,
                                                int sw, int ph, int pw, I& r0, I& r1, I& q0,
                                                I& q1) {
  const I low_r = ih + ph - kh + 1, low_q = iw + pw - kw + 1;
  r0 = low_r <= 0 ? 0 : (low_r + sh - 1) / sh;
  q0 = low_q <= 0 ? 0 : (low_q + sw - 1) / sw;
  r1 = min(oh - 1, (ih + ph) / sh);
  q1 = min(ow - 1, (iw + pw) / sw);
}
)";

std::string SizeArgs(const PoolSizes* sizes) {
  if (sizes == nullptr) return "n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw";
  return absl::StrCat(sizes->n, "LL, ", sizes->c, "LL, ", sizes->h, "LL, ", sizes->w, "LL, ",
                      sizes->oh, "LL, ", sizes->ow, "LL, ", sizes->kh, ", ", sizes->kw, ", ",
                      sizes->sh, ", ", sizes->sw, ", ", sizes->ph, ", ", sizes->pw);
}

std::string EntryFor(const std::string& name, const std::string& params, const std::string& body,
                     const std::string& tensors, const PoolSizes* sizes, const std::string& extra) {
  const std::string args = absl::StrCat(tensors, ", ", SizeArgs(sizes), extra);
  return absl::StrCat("extern \"C\" __global__ void ", name, "(", params,
                      ") {\n  if (n * c * h * w < (1LL << 31)) {\n    ", body, "<int>(", args,
                      ");\n  } else {\n    ", body, "<long long>(", args, ");\n  }\n}\n");
}

}  // namespace reprise::codegen::pooling_source

namespace reprise::codegen {

using pooling_source::EntryFor;
using pooling_source::kGradTensorParams;
using pooling_source::kImageIndexing;
using pooling_source::kSizeParams;

// The max-pooling kernels index in 32-bit arithmetic when the tensors allow it: 64-bit division
// costs several times more, and these kernels are all index arithmetic.
GeneratedKernel MaxPool2d(DType dtype) {
  const std::string name = ElementKernelName("reprise_max_pool2d", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), kImageIndexing, R"(
template <typename I>
__device__ void MaxPool2dBody(const elem_t* __restrict__ x, elem_t* __restrict__ y, I n, I c, I h,
                              I w, I oh, I ow, int kh, int kw, int sh, int sw, int ph, int pw,
                              int channels_last) {
  const I total = n * c * oh * ow;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I b, ch, r, q;
    ImageCoords<I>(i, c, oh, ow, channels_last, b, ch, r, q);
    float best = 0.0f;
    bool found = false;
    for (int a = 0; a < kh; ++a) {
      const I row = r * sh - ph + a;
      if (row < 0 || row >= h) continue;
      for (int e = 0; e < kw; ++e) {
        const I col = q * sw - pw + e;
        if (col < 0 || col >= w) continue;
        const float v = ToFloat(x[ImageOffset<I>(b, ch, row, col, c, h, w, channels_last)]);
        if (!found || v > best || (v != v && best == best)) best = v;
        found = true;
      }
    }
    y[i] = FromFloat(best);  // Exact for numbers: best is one of x's values.
  }
}
)",
                             EntryFor(name,
                                      absl::StrCat("const elem_t* __restrict__ x, elem_t* "
                                                   "__restrict__ y, ",
                                                   kSizeParams),
                                      "MaxPool2dBody", "x, y", nullptr, ", channels_last"))};
}

GeneratedKernel MaxPool2dGrad(DType dtype) {
  const std::string name = ElementKernelName("reprise_max_pool2d_grad", dtype);
  return {name,
          absl::StrCat(ElementTypeSource(dtype), kImageIndexing, R"(
template <typename I>
__device__ void MaxPool2dGradBody(const elem_t* __restrict__ dy, const elem_t* __restrict__ x,
                                  const elem_t* __restrict__ y, elem_t* __restrict__ dx, I n, I c,
                                  I h, I w, I oh, I ow, int kh, int kw, int sh, int sw, int ph,
                                  int pw, int channels_last) {
  const I total = n * c * h * w;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I b, ch, ih, iw;
    ImageCoords<I>(i, c, h, w, channels_last, b, ch, ih, iw);
    const float xi = ToFloat(x[i]);
    I r0, r1, q0, q1;
    CoveringWindows<I>(ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, r0, r1, q0, q1);
    float sum = 0.0f;
    for (I r = r0; r <= r1; ++r) {
      for (I q = q0; q <= q1; ++q) {
        const I yi = ImageOffset<I>(b, ch, r, q, c, oh, ow, channels_last);
        const float m = ToFloat(y[yi]);
        // Only an element equal to its window's maximum can receive the window's gradient; then
        // it must also be the window's first such element.
        if (!(xi == m || (xi != xi && m != m))) continue;
        I first_row = -1, first_col = -1;
        for (int a = 0; a < kh && first_row < 0; ++a) {
          const I row = r * sh - ph + a;
          if (row < 0 || row >= h) continue;
          for (int e = 0; e < kw; ++e) {
            const I col = q * sw - pw + e;
            if (col < 0 || col >= w) continue;
            const float v = ToFloat(x[ImageOffset<I>(b, ch, row, col, c, h, w, channels_last)]);
            if (v == m || (v != v && m != m)) {
              first_row = row;
              first_col = col;
              break;
            }
          }
        }
        if (first_row == ih && first_col == iw) sum += ToFloat(dy[yi]);
      }
    }
    dx[i] = FromFloat(sum);
  }
}
)",
                       EntryFor(name, absl::StrCat(kGradTensorParams, kSizeParams),
                                "MaxPool2dGradBody", "dy, x, y, dx", nullptr, ", channels_last"))};
}

GeneratedKernel GlobalAvgPoolNchw(DType dtype) {
  const std::string name = ElementKernelName("reprise_global_avg_pool_nchw", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "extern \"C\" __global__ void ", name, R"((
    const elem_t* __restrict__ x, elem_t* __restrict__ y, long long rows, long long hw) {
  const int lane = threadIdx.x % 32;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  for (long long row = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += warps) {
    const elem_t* xr = x + row * hw;
    float s = 0.0f;
    for (long long p = lane; p < hw; p += 32) s += ToFloat(xr[p]);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[row] = FromFloat(s / (float)hw);
  }
}
)")};
}

GeneratedKernel GlobalAvgPoolNhwc(DType dtype) {
  const std::string name = ElementKernelName("reprise_global_avg_pool_nhwc", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "extern \"C\" __global__ void ", name, R"((
    const elem_t* __restrict__ x, elem_t* __restrict__ y, long long n, long long c,
    long long hw) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n * c;
       i += (long long)gridDim.x * blockDim.x) {
    const elem_t* xb = x + (i / c) * hw * c + i % c;
    float s = 0.0f;
    for (long long p = 0; p < hw; ++p) s += ToFloat(xb[p * c]);
    y[i] = FromFloat(s / (float)hw);
  }
}
)")};
}

GeneratedKernel GlobalAvgPoolGrad(DType dtype) {
  const std::string name = ElementKernelName("reprise_global_avg_pool_grad", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "extern \"C\" __global__ void ", name, R"((
    const elem_t* __restrict__ dy, elem_t* __restrict__ dx, long long n, long long c,
    long long hw, int channels_last) {
  const long long total = n * c * hw;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long row = channels_last ? (i / (hw * c)) * c + i % c : i / hw;
    dx[i] = FromFloat(ToFloat(dy[row]) / (float)hw);
  }
}
)")};
}

std::vector<GeneratedKernel> PoolingKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    for (GeneratedKernel (*make)(DType) :
         {MaxPool2d, MaxPool2dGrad, GlobalAvgPoolNchw, GlobalAvgPoolNhwc, GlobalAvgPoolGrad}) {
      kernels.push_back(make(dtype));
    }
  }
  return kernels;
}

std::vector<GeneratedKernel> PoolingKernels(const PoolSizes& sizes, DType dtype) {
  std::vector<GeneratedKernel> kernels;
  for (GeneratedKernel (*make)(DType, const PoolSizes&) :
       {MaxPool2dNhwc4, MaxPool2dGradNhwc4, MaxPool2dArgmaxNhwc4, MaxPool2dGradFromArgmaxNhwc4,
        BnReluMaxPool2dNhwc4}) {
    kernels.push_back(make(dtype, sizes));
  }
  return kernels;
}

}  // namespace reprise::codegen
