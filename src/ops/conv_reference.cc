#include "src/ops/conv_reference.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "src/util/parallel_for.h"

namespace reprise::ops {
namespace {

using runtime::ConvKind;
using runtime::ConvShape;

// Product terms below which the reference runs on the calling thread alone.
constexpr int64_t kTapsPerThread = int64_t{1} << 22;

// [n][rows][cols] -> [n][cols][rows]: a tensor of logical extents (n, c, h, w) in NCHW to
// channels-last (rows = c, cols = h·w) and back (rows = h·w, cols = c). A filter (k, c per group,
// r, s) is such a tensor too: NCHW stores it [k, c, r, s], NHWC [k, r, s, c].
std::vector<double> SwapInner(absl::Span<const double> v, int64_t n, int64_t rows, int64_t cols) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        out[(i * cols + c) * rows + r] = v[(i * rows + r) * cols + c];
    }
  }
  return out;
}

std::vector<double> ToChannelsLast(absl::Span<const double> v, Layout layout, int64_t n, int64_t c,
                                   int64_t h, int64_t w) {
  if (layout == Layout::kNHWC) return {v.begin(), v.end()};
  return SwapInner(v, n, c, h * w);
}

std::vector<double> FromChannelsLast(std::vector<double> v, Layout layout, int64_t n, int64_t c,
                                     int64_t h, int64_t w) {
  if (layout == Layout::kNHWC) return v;
  return SwapInner(v, n, h * w, c);
}

// The input row (or column) that output row p reads through filter row r, or -1 in the padding.
int64_t InputRow(int64_t p, int64_t r, int64_t stride, int64_t pad, int64_t dilation,
                 int64_t extent) {
  const int64_t h = p * stride - pad + r * dilation;
  return h >= 0 && h < extent ? h : -1;
}

// tap(r, s, h, w) for every filter position (r, s), in that order, whose input pixel (h, w) output
// pixel (p, q) reads, skipping those in the padding.
template <typename Tap>
void ForEachTap(const ConvShape& g, int64_t p, int64_t q, Tap&& tap) {
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t h = InputRow(p, r, g.stride_h, g.pad_h, g.dilation_h, g.h);
    if (h < 0) continue;
    for (int64_t s = 0; s < g.s; ++s) {
      const int64_t w = InputRow(q, s, g.stride_w, g.pad_w, g.dilation_w, g.w);
      if (w >= 0) tap(r, s, h, w);
    }
  }
}

// y[n] (channels-last) from x (channels-last) and the filters by group with output channels last,
// wt[g][c][r][s][k of the group]: each y element sums over (c, r, s) in that order.
void ForwardImage(const ConvShape& g, int64_t n, const double* x, const double* wt, double* y) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  for (int64_t p = 0; p < g.p; ++p) {
    for (int64_t q = 0; q < g.q; ++q) {
      double* y_row = y + ((n * g.p + p) * g.q + q) * g.k;
      std::fill(y_row, y_row + g.k, 0.0);
      for (int64_t group = 0; group < g.groups; ++group) {
        double* __restrict__ out = y_row + group * kg;
        for (int64_t c = 0; c < cg; ++c) {
          ForEachTap(g, p, q, [&](int64_t r, int64_t s, int64_t h, int64_t w) {
            const double xv = x[((n * g.h + h) * g.w + w) * g.c + group * cg + c];
            const double* __restrict__ taps = wt + (((group * cg + c) * g.r + r) * g.s + s) * kg;
            for (int64_t k = 0; k < kg; ++k) out[k] += xv * taps[k];
          });
        }
      }
    }
  }
}

// dx[n] (channels-last) from dy (channels-last) and the filters [k][r][s][c of the group]: each dx
// element sums over (p, q, k, r, s) in that order.
void DgradImage(const ConvShape& g, int64_t n, const double* dy, const double* krsc, double* dx) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  double* dx_image = dx + n * g.h * g.w * g.c;
  std::fill(dx_image, dx_image + g.h * g.w * g.c, 0.0);
  for (int64_t p = 0; p < g.p; ++p) {
    for (int64_t q = 0; q < g.q; ++q) {
      const double* dy_row = dy + ((n * g.p + p) * g.q + q) * g.k;
      for (int64_t k = 0; k < g.k; ++k) {
        const double dyv = dy_row[k];
        const int64_t first_channel = (k / kg) * cg;
        ForEachTap(g, p, q, [&](int64_t r, int64_t s, int64_t h, int64_t w) {
          double* __restrict__ out = dx_image + (h * g.w + w) * g.c + first_channel;
          const double* __restrict__ taps = krsc + ((k * g.r + r) * g.s + s) * cg;
          for (int64_t c = 0; c < cg; ++c) out[c] += dyv * taps[c];
        });
      }
    }
  }
}

// dw[k] ([r][s][c of the group]) from x and dy (channels-last): each element sums over (n, p, q)
// in that order.
void WgradChannel(const ConvShape& g, int64_t k, const double* x, const double* dy, double* dw) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  const int64_t first_channel = (k / kg) * cg;
  double* dw_k = dw + k * g.r * g.s * cg;
  std::fill(dw_k, dw_k + g.r * g.s * cg, 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        const double dyv = dy[((n * g.p + p) * g.q + q) * g.k + k];
        ForEachTap(g, p, q, [&](int64_t r, int64_t s, int64_t h, int64_t w) {
          const double* __restrict__ in = x + ((n * g.h + h) * g.w + w) * g.c + first_channel;
          double* __restrict__ out = dw_k + (r * g.s + s) * cg;
          for (int64_t c = 0; c < cg; ++c) out[c] += dyv * in[c];
        });
      }
    }
  }
}

// The filters [k][r][s][c of the group] regrouped as [group][c][r][s][k of the group].
std::vector<double> OutputChannelsLast(const ConvShape& g, const std::vector<double>& krsc) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  std::vector<double> out(krsc.size());
  for (int64_t k = 0; k < g.k; ++k) {
    const int64_t group = k / kg, kk = k - group * kg;
    for (int64_t r = 0; r < g.r; ++r) {
      for (int64_t s = 0; s < g.s; ++s) {
        for (int64_t c = 0; c < cg; ++c) {
          out[(((group * cg + c) * g.r + r) * g.s + s) * kg + kk] =
              krsc[((k * g.r + r) * g.s + s) * cg + c];
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> ConvReference(ConvKind kind, const ConvShape& g, absl::Span<const double> a,
                                  absl::Span<const double> b) {
  const int64_t cg = g.c / g.groups;
  const int64_t taps = g.n * g.k * g.p * g.q * cg * g.r * g.s;
  const int threads = taps < kTapsPerThread ? 1 : HardwareThreads();
  switch (kind) {
    case ConvKind::kForward: {
      const std::vector<double> x = ToChannelsLast(a, g.layout, g.n, g.c, g.h, g.w);
      const std::vector<double> wt =
          OutputChannelsLast(g, ToChannelsLast(b, g.layout, g.k, cg, g.r, g.s));
      std::vector<double> y(g.n * g.p * g.q * g.k);
      ParallelFor(g.n, threads,
                  [&](int64_t n) { ForwardImage(g, n, x.data(), wt.data(), y.data()); });
      return FromChannelsLast(std::move(y), g.layout, g.n, g.k, g.p, g.q);
    }
    case ConvKind::kBackwardData: {
      const std::vector<double> dy = ToChannelsLast(a, g.layout, g.n, g.k, g.p, g.q);
      const std::vector<double> krsc = ToChannelsLast(b, g.layout, g.k, cg, g.r, g.s);
      std::vector<double> dx(g.n * g.h * g.w * g.c);
      ParallelFor(g.n, threads,
                  [&](int64_t n) { DgradImage(g, n, dy.data(), krsc.data(), dx.data()); });
      return FromChannelsLast(std::move(dx), g.layout, g.n, g.c, g.h, g.w);
    }
    case ConvKind::kBackwardFilter: {
      const std::vector<double> x = ToChannelsLast(a, g.layout, g.n, g.c, g.h, g.w);
      const std::vector<double> dy = ToChannelsLast(b, g.layout, g.n, g.k, g.p, g.q);
      std::vector<double> dw(g.k * g.r * g.s * cg);
      ParallelFor(g.k, threads,
                  [&](int64_t k) { WgradChannel(g, k, x.data(), dy.data(), dw.data()); });
      return FromChannelsLast(std::move(dw), g.layout, g.k, cg, g.r, g.s);
    }
  }
  return {};
}

}  // namespace reprise::ops
