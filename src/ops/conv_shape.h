// Attribute parsing and shape rules the convolution ops (src/ops/conv.h) share: each op's node
// becomes one runtime::ConvShape, which the CPU reference loops over and cuDNN is described by.
#ifndef REPRISE_SRC_OPS_CONV_SHAPE_H_
#define REPRISE_SRC_OPS_CONV_SHAPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/runtime/cudnn_conv.h"

namespace reprise::ops {

// A 4-D activation's logical dimensions, whatever its layout.
struct ActivationDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
};
// Precondition: shape has rank 4.
ActivationDims ActivationDimsOf(const Shape& shape, Layout layout);
Shape ActivationShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w);
// [k, c, r, s] (NCHW) or [k, r, s, c] (NHWC); c counts one group's input channels.
Shape FilterShape(Layout layout, int64_t k, int64_t c, int64_t r, int64_t s);

// The convolution a node of each op computes, from its attributes and input specs.
// InvalidArgument names the shapes (see src/ops/conv.h for the checks).
absl::StatusOr<runtime::ConvShape> Conv2dShape(const Attrs& attrs, const TensorSpec& x,
                                               const TensorSpec& w);
// (dy, w) and attrs input_h, input_w.
absl::StatusOr<runtime::ConvShape> Conv2dDgradShape(const Attrs& attrs, const TensorSpec& dy,
                                                    const TensorSpec& w);
// (x, dy) and attrs kernel_h, kernel_w.
absl::StatusOr<runtime::ConvShape> Conv2dWgradShape(const Attrs& attrs, const TensorSpec& x,
                                                    const TensorSpec& dy);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CONV_SHAPE_H_
