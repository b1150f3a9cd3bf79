// The CPU reference of the three convolutions (conv.cc's conv2d, conv2d_dgrad, conv2d_wgrad), in
// double whatever the tensors' type. The operands are first copied into channels-last arrays
// (activations [N, H, W, C], filters [K, R, S, C/G]) so that every innermost loop runs along
// channels, contiguous, and vectorizes; the result is written back in the convolution's layout.
// So NCHW and NHWC give the same bits, and each element sums its terms in one fixed order:
//   y[n, k, p, q]  over (c, r, s);   dx[n, c, h, w]  over (p, q, k, r, s);   dw[k, c, r, s]  over
//   (n, p, q).
// Large convolutions run on the machine's threads, split by image (y, dx) or output channel (dw):
// every element is computed by one thread, so a slice has the bits of the same convolution of
// that slice alone.
#ifndef REPRISE_SRC_OPS_CONV_REFERENCE_H_
#define REPRISE_SRC_OPS_CONV_REFERENCE_H_

#include <vector>

#include "absl/types/span.h"
#include "src/runtime/cudnn_conv.h"

namespace reprise::ops {

// Operands in node order, in `shape.layout`: forward (x, w) -> y; data gradient (dy, w) -> dx;
// weight gradient (x, dy) -> dw. The result is in `shape.layout` too.
std::vector<double> ConvReference(runtime::ConvKind kind, const runtime::ConvShape& shape,
                                  absl::Span<const double> a, absl::Span<const double> b);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CONV_REFERENCE_H_
