#include "src/codegen/pooling_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

// Index helpers of dense image tensors, shared by the pooling kernels.
const std::string kImageIndexing = R"(
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

// The size arguments a kernel's entry passes to its body: the entry's own parameters, or the
// sizes themselves as literals, so that the window arithmetic divides by constants (a multiply and
// a shift) instead of by registers.
std::string SizeArgs(const PoolSizes* sizes) {
  if (sizes == nullptr) return "n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw";
  return absl::StrCat(sizes->n, "LL, ", sizes->c, "LL, ", sizes->h, "LL, ", sizes->w, "LL, ",
                      sizes->oh, "LL, ", sizes->ow, "LL, ", sizes->kh, ", ", sizes->kw, ", ",
                      sizes->sh, ", ", sizes->sw, ", ", sizes->ph, ", ", sizes->pw);
}

// "extern "C" __global__ void name(params) { ... }" calling body<int>(tensors, sizes[, extra])
// where the tensors index in 32 bits (n·c·h·w < 2^31), else body<long long>(...).
std::string EntryFor(const std::string& name, const std::string& params, const std::string& body,
                     const std::string& tensors, const PoolSizes* sizes = nullptr,
                     const std::string& extra = "") {
  const std::string args = absl::StrCat(tensors, ", ", SizeArgs(sizes), extra);
  return absl::StrCat("extern \"C\" __global__ void ", name, "(", params,
                      ") {\n  if (n * c * h * w < (1LL << 31)) {\n    ", body, "<int>(", args,
                      ");\n  } else {\n    ", body, "<long long>(", args, ");\n  }\n}\n");
}

// Every max-pooling kernel's size parameters, and the same names as arguments.
constexpr char kSizeParams[] =
    "long long n, long long c, long long h, long long w, long long oh, long long ow, int kh, "
    "int kw, int sh, int sw, int ph, int pw, int channels_last";
// The gradient kernels' tensors (dy, x, y, dx), before the sizes.
constexpr char kGradTensorParams[] =
    "const elem_t* __restrict__ dy, const elem_t* __restrict__ x, const elem_t* __restrict__ y, "
    "elem_t* __restrict__ dx, ";

}  // namespace

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

// Channels-last max pooling, four channels per thread: the window arithmetic is shared by the
// four, and x, y and dy move in 4-element loads. Same scan, tie rule and summation order as the
// scalar kernels above, so the same bits.
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
}  // namespace

GeneratedKernel MaxPool2dNhwc4(DType dtype, const PoolSizes& sizes) {
  const std::string name = ElementKernelName("reprise_max_pool2d_nhwc4", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, R"(
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
  return {name, absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, R"(
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
  return {name, absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, R"(
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
          absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, R"(
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
  return {name, absl::StrCat(ElementTypeSource(dtype), WindowDefines(sizes), kImageIndexing, kFour, R"(
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
