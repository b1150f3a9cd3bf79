// The channels-last max-pooling kernels of src/codegen/pooling_kernels.h that take four channels
// per thread (MaxPool2dNhwc4 and its gradients, the argmax, the pooling of a recomputed batch-norm
// activation), each compiled for one shape's sizes.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/codegen/element_type.h"
#include "src/codegen/pooling_kernels.h"
#include "src/codegen/pooling_source.h"

namespace reprise::codegen {

using pooling_source::EntryFor;
using pooling_source::kGradTensorParams;
using pooling_source::kImageIndexing;
using pooling_source::kSizeParams;

// The window arithmetic is shared by the four channels, and x, y and dy move in 4-element loads.
// Same scan, tie rule and summation order as the scalar kernels (pooling_kernels.cc), so the same
// bits.
namespace {
// The sizes' window as constants of the kernel (the loops that load a whole window, or every
// window covering an element, before using any of it are unrolled over them): its extents, and
// how many windows at most cover one element along each axis.
std::string WindowDefines(const PoolSizes& sizes) {
  auto covering = [](int k, int s) { return (k + s - 1) / s; };
  return absl::StrCat("#define POOL_KH ", sizes.kh, "\n#define POOL_KW ", sizes.kw,
                      "\n#define POOL_COVER_R ", covering(sizes.kh, sizes.sh),
                      "\n#define POOL_COVER_Q ", covering(sizes.kw, sizes.sw), "\n");
}
const std::string kFour = R"(
// Windows (or covering windows) of up to this many elements are loaded whole before use.
#define POOL_LOAD_AHEAD 16
__device__ __forceinline__ void Unpack(float4 v, float (&out)[4]) {
  out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
}
__device__ __forceinline__ bool SameMax(float v, float m) { return v == m || (v != v && m != m); }
// Output i's window over x (channels-last, 4 channels from ch), each loaded value passed through
// `value(v, j)` (j the channel within the 4): max_pool2d's maximum in `best` (the first element
// equal to it keeps it, and a NaN beats any number), and in `first` the row-major index within
// the window of the element that set it, which is the first one equal to the maximum (NaN
// matching NaN): the element max_pool2d_grad sends the window's gradient to. Every element of the
// window (POOL_KH x POOL_KW, the sizes' own window) is loaded before any is compared, so that the
// loads are in flight together rather than one after another.
template <typename I, typename Value>
__device__ __forceinline__ void ScanWindow4(const elem_t* __restrict__ x, I i, I c, I h, I w,
                                            I oh, I ow, int kh, int kw, int sh, int sw, int ph,
                                            int pw, const Value& value, float (&best)[4],
                                            int (&first)[4]) {
  I b, r, q, ch;
  GroupCoords<I>(i, c, oh, ow, b, r, q, ch);
#if POOL_KH * POOL_KW <= POOL_LOAD_AHEAD
  float v[POOL_KH][POOL_KW][4];
  bool inside[POOL_KH][POOL_KW];
#pragma unroll
  for (int a = 0; a < POOL_KH; ++a) {
    const I row = r * sh - ph + a;
#pragma unroll
    for (int e = 0; e < POOL_KW; ++e) {
      const I col = q * sw - pw + e;
      inside[a][e] = row >= 0 && row < h && col >= 0 && col < w;
      if (inside[a][e]) Unpack(Load4(x + ((b * h + row) * w + col) * c + ch), v[a][e]);
    }
  }
  bool found = false;
#pragma unroll
  for (int a = 0; a < POOL_KH; ++a) {
#pragma unroll
    for (int e = 0; e < POOL_KW; ++e) {
      if (!inside[a][e]) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float u = value(v[a][e][j], j);
        if (!found || u > best[j] || (u != u && best[j] == best[j])) {
          best[j] = u;
          first[j] = a * kw + e;  // Whole registers: byte arithmetic costs more.
        }
      }
      found = true;
    }
  }
#else  // A window too large to hold in registers: one element at a time.
  bool found = false;
  for (int a = 0; a < kh; ++a) {
    const I row = r * sh - ph + a;
    if (row < 0 || row >= h) continue;
    for (int e = 0; e < kw; ++e) {
      const I col = q * sw - pw + e;
      if (col < 0 || col >= w) continue;
      float v[4];
      Unpack(Load4(x + ((b * h + row) * w + col) * c + ch), v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float u = value(v[j], j);
        if (!found || u > best[j] || (u != u && best[j] == best[j])) {
          best[j] = u;
          first[j] = a * kw + e;
        }
      }
      found = true;
    }
  }
#endif
}
template <typename I>
__device__ __forceinline__ void StoreArgmax4(unsigned char* __restrict__ argmax, I i,
                                             const int (&first)[4]) {
  *reinterpret_cast<uchar4*>(argmax + i * 4) =
      make_uchar4(static_cast<unsigned char>(first[0]), static_cast<unsigned char>(first[1]),
                  static_cast<unsigned char>(first[2]), static_cast<unsigned char>(first[3]));
}
)";
// A four-channel kernel's source: the element type, the sizes' window constants, the shared
// helpers, then its body and entry.
std::string Nhwc4Source(DType dtype, const PoolSizes& sizes, absl::string_view body,
                        absl::string_view entry) {
  return absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, body,
                      entry);
}

}  // namespace

GeneratedKernel MaxPool2dNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_max_pool2d_nhwc4", dtype);
  return {name, Nhwc4Source(dtype, sizes, R"(
template <typename I>
__device__ void MaxPool2dNhwc4Body(const elem_t* __restrict__ x, elem_t* __restrict__ y,
                                   unsigned char* __restrict__ argmax, I n, I c, I h, I w, I oh,
                                   I ow, int kh, int kw, int sh, int sw, int ph, int pw) {
  const I groups = c / 4, total = n * oh * ow * groups;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    float best[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int first[4] = {255, 255, 255, 255};
    ScanWindow4<I>(x, i, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw,
                   [](float v, int) { return v; }, best, first);
    Store4(y + i * 4, make_float4(best[0], best[1], best[2], best[3]));  // Exact: x's values.
    if (argmax != nullptr) StoreArgmax4<I>(argmax, i, first);
  }
}
)",
                            EntryFor(name,
                                     absl::StrCat("const elem_t* __restrict__ x, elem_t* "
                                                  "__restrict__ y, unsigned char* __restrict__ "
                                                  "argmax, ",
                                                  kSizeParams),
                                     "MaxPool2dNhwc4Body", "x, y, argmax", &sizes))};
}

GeneratedKernel MaxPool2dGradNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_max_pool2d_grad_nhwc4", dtype);
  return {name, Nhwc4Source(dtype, sizes, R"(
template <typename I>
__device__ void MaxPool2dGradNhwc4Body(const elem_t* __restrict__ dy,
                                       const elem_t* __restrict__ x,
                                       const elem_t* __restrict__ y, elem_t* __restrict__ dx,
                                       I n, I c, I h, I w, I oh, I ow, int kh, int kw, int sh,
                                       int sw, int ph, int pw) {
  const I groups = c / 4, total = n * h * w * groups;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I b, ih, iw, ch;
    GroupCoords<I>(i, c, h, w, b, ih, iw, ch);
    float xi[4], sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Unpack(Load4(x + i * 4), xi);
    I r0, r1, q0, q1;
    CoveringWindows<I>(ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, r0, r1, q0, q1);
    for (I r = r0; r <= r1; ++r) {
      for (I q = q0; q <= q1; ++q) {
        const I yi = ((b * oh + r) * ow + q) * c + ch;
        float m[4];
        Unpack(Load4(y + yi), m);
        // A channel whose element equals its window's maximum takes the window's gradient unless
        // an element scanned before it (row-major) equals the maximum too.
        bool take[4], any = false;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          take[j] = SameMax(xi[j], m[j]);
          any |= take[j];
        }
        for (int a = 0; a < kh && any; ++a) {
          const I row = r * sh - ph + a;
          if (row < 0 || row >= h) continue;
          if (row > ih) break;
          for (int e = 0; e < kw && any; ++e) {
            const I col = q * sw - pw + e;
            if (col < 0 || col >= w) continue;
            if (row == ih && col >= iw) break;  // This element itself: nothing earlier matched.
            float v[4];
            Unpack(Load4(x + ((b * h + row) * w + col) * c + ch), v);
            any = false;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              take[j] = take[j] && !SameMax(v[j], m[j]);
              any |= take[j];
            }
          }
        }
        if (!any) continue;
        float d[4];
        Unpack(Load4(dy + yi), d);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (take[j]) sum[j] += d[j];
        }
      }
    }
    Store4(dx + i * 4, make_float4(sum[0], sum[1], sum[2], sum[3]));
  }
}
)",
                            EntryFor(name, absl::StrCat(kGradTensorParams, kSizeParams),
                                     "MaxPool2dGradNhwc4Body", "dy, x, y, dx", &sizes))};
}

GeneratedKernel MaxPool2dArgmaxNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_max_pool2d_argmax_nhwc4", dtype);
  return {name, Nhwc4Source(dtype, sizes, R"(
template <typename I>
__device__ void MaxPool2dArgmaxNhwc4Body(const elem_t* __restrict__ x,
                                         const elem_t* __restrict__ y,
                                         unsigned char* __restrict__ argmax, I n, I c, I h, I w,
                                         I oh, I ow, int kh, int kw, int sh, int sw, int ph,
                                         int pw) {
  const I groups = c / 4, total = n * oh * ow * groups;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I b, r, q, ch;
    GroupCoords<I>(i, c, oh, ow, b, r, q, ch);
    float m[4];
    Unpack(Load4(y + i * 4), m);
    unsigned char first[4] = {255, 255, 255, 255};
    int left = 4;
    for (int a = 0; a < kh && left > 0; ++a) {
      const I row = r * sh - ph + a;
      if (row < 0 || row >= h) continue;
      for (int e = 0; e < kw && left > 0; ++e) {
        const I col = q * sw - pw + e;
        if (col < 0 || col >= w) continue;
        float v[4];
        Unpack(Load4(x + ((b * h + row) * w + col) * c + ch), v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (first[j] == 255 && SameMax(v[j], m[j])) {
            first[j] = static_cast<unsigned char>(a * kw + e);
            --left;
          }
        }
      }
    }
    *reinterpret_cast<uchar4*>(argmax + i * 4) = make_uchar4(first[0], first[1], first[2], first[3]);
  }
}
)",
                            EntryFor(name,
                                     absl::StrCat("const elem_t* __restrict__ x, const elem_t* "
                                                  "__restrict__ y, unsigned char* __restrict__ "
                                                  "argmax, ",
                                                  kSizeParams),
                                     "MaxPool2dArgmaxNhwc4Body", "x, y, argmax", &sizes))};
}

GeneratedKernel MaxPool2dGradFromArgmaxNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_max_pool2d_grad_from_argmax_nhwc4", dtype);
  return {name,
          Nhwc4Source(dtype, sizes, R"(
template <typename I>
__device__ void MaxPool2dGradFromArgmaxNhwc4Body(const elem_t* __restrict__ dy,
                                                 const unsigned char* __restrict__ argmax,
                                                 elem_t* __restrict__ dx, I n, I c, I h, I w, I oh,
                                                 I ow, int kh, int kw, int sh, int sw, int ph,
                                                 int pw) {
  const I groups = c / 4, total = n * h * w * groups;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I b, ih, iw, ch;
    GroupCoords<I>(i, c, h, w, b, ih, iw, ch);
    I r0, r1, q0, q1;
    CoveringWindows<I>(ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, r0, r1, q0, q1);
#if POOL_COVER_R * POOL_COVER_Q <= POOL_LOAD_AHEAD
    // Every covering window's argmax and gradient are loaded before any is used, so that they are
    // in flight together; a gradient no channel takes is loaded all the same (from the cache:
    // the neighbouring elements' threads read it too).
    uchar4 first[POOL_COVER_R][POOL_COVER_Q];
    float d[POOL_COVER_R][POOL_COVER_Q][4];
#pragma unroll
    for (int dr = 0; dr < POOL_COVER_R; ++dr) {
#pragma unroll
      for (int dq = 0; dq < POOL_COVER_Q; ++dq) {
        const I r = r0 + dr, q = q0 + dq;
        const I yi = ((b * oh + r) * ow + q) * c + ch;
        first[dr][dq] = make_uchar4(255, 255, 255, 255);  // No window there: nothing to take.
        if (r <= r1 && q <= q1) {
          first[dr][dq] = *reinterpret_cast<const uchar4*>(argmax + yi);
          Unpack(Load4(dy + yi), d[dr][dq]);
        }
      }
    }
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // The windows in the reference's order (row-major), so the sums are its sums.
#pragma unroll
    for (int dr = 0; dr < POOL_COVER_R; ++dr) {
#pragma unroll
      for (int dq = 0; dq < POOL_COVER_Q; ++dq) {
        const I r = r0 + dr, q = q0 + dq;
        if (r > r1 || q > q1) continue;
        // This element's index in window (r, q), row-major.
        const int mine = static_cast<int>((ih - (r * sh - ph)) * kw + (iw - (q * sw - pw)));
        const uchar4 f = first[dr][dq];
        if (f.x == mine) sum[0] += d[dr][dq][0];
        if (f.y == mine) sum[1] += d[dr][dq][1];
        if (f.z == mine) sum[2] += d[dr][dq][2];
        if (f.w == mine) sum[3] += d[dr][dq][3];
      }
    }
#else  // Too many covering windows to hold in registers: one window at a time.
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (I r = r0; r <= r1; ++r) {
      for (I q = q0; q <= q1; ++q) {
        const int mine = static_cast<int>((ih - (r * sh - ph)) * kw + (iw - (q * sw - pw)));
        const I yi = ((b * oh + r) * ow + q) * c + ch;
        const uchar4 f = *reinterpret_cast<const uchar4*>(argmax + yi);
        const bool take[4] = {f.x == mine, f.y == mine, f.z == mine, f.w == mine};
        if (!(take[0] || take[1] || take[2] || take[3])) continue;
        float d[4];
        Unpack(Load4(dy + yi), d);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (take[j]) sum[j] += d[j];
        }
      }
    }
#endif
    Store4(dx + i * 4, make_float4(sum[0], sum[1], sum[2], sum[3]));
  }
}
)",
                      EntryFor(name,
                               absl::StrCat("const elem_t* __restrict__ dy, const unsigned "
                                            "char* __restrict__ argmax, elem_t* "
                                            "__restrict__ dx, ",
                                            kSizeParams),
                               "MaxPool2dGradFromArgmaxNhwc4Body", "dy, argmax, dx", &sizes))};
}

GeneratedKernel BnReluMaxPool2dNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_bn_relu_max_pool2d_nhwc4", dtype);
  return {name, Nhwc4Source(dtype, sizes, R"(
template <typename I>
__device__ void BnReluMaxPool2dNhwc4Body(const elem_t* __restrict__ x,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ gamma,
                                         const float* __restrict__ invstd,
                                         const float* __restrict__ beta, elem_t* __restrict__ y,
                                         unsigned char* __restrict__ argmax, I n, I c, I h, I w,
                                         I oh, I ow, int kh, int kw, int sh, int sw, int ph,
                                         int pw) {
  const I groups = c / 4, total = n * oh * ow * groups;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    const I ch = (i % groups) * 4;
    // batch_norm_apply's per-channel factors, formed as it forms them (scale in float).
    float mu[4], scale[4], shift[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mu[j] = mean[ch + j];
      scale[j] = gamma[ch + j] * invstd[ch + j];
      shift[j] = beta[ch + j];
    }
    // Each window element is the ReLU output as batch_norm_apply stores it (a NaN stays NaN),
    // scanned as max_pool2d scans the stored output.
    const auto relu_of_bn = [&](float v, int j) {
      const float a = fmaf(v - mu[j], scale[j], shift[j]);
      return ToFloat(FromFloat(a > 0.0f || a != a ? a : 0.0f));
    };
    float best[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int first[4] = {255, 255, 255, 255};
    ScanWindow4<I>(x, i, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, relu_of_bn, best, first);
    Store4(y + i * 4, make_float4(best[0], best[1], best[2], best[3]));
    StoreArgmax4<I>(argmax, i, first);
  }
}
)",
                            EntryFor(name,
                                     absl::StrCat("const elem_t* __restrict__ x, const float* "
                                                  "__restrict__ mean, const float* __restrict__ "
                                                  "gamma, const float* __restrict__ invstd, "
                                                  "const float* __restrict__ beta, elem_t* "
                                                  "__restrict__ y, unsigned char* __restrict__ "
                                                  "argmax, ",
                                                  kSizeParams),
                                     "BnReluMaxPool2dNhwc4Body",
                                     "x, mean, gamma, invstd, beta, y, argmax", &sizes))};
}

}  // namespace reprise::codegen
