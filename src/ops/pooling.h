// Pooling and reshaping ops of convolutional networks: max pooling, global average pooling,
// flatten and reshape, each with its CPU reference, gradient rule and GPU lowering. Also the
// layout helpers the image ops share (batch_norm.cc uses them too).
//
// Image tensors are 4-D, [N, C, H, W] with attr layout "NCHW" (the default) or [N, H, W, C] with
// layout "NHWC"; both are dense in their stored order.
#ifndef REPRISE_SRC_OPS_POOLING_H_
#define REPRISE_SRC_OPS_POOLING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/codegen/pooling_kernels.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

// max_pool2d: (x) -> y. Attrs (int64) kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
// layout. Padding counts as -inf (PyTorch), and each pad must be at most half its kernel so that
// every window holds an element of x. Output extents floor((H + 2·pad - kernel) / stride) + 1.
// NaN wins over any number (the first NaN of a window), as in PyTorch.
const ir::OpDef& MaxPool2dOp();
// (dy, x, y) -> dx: each window's gradient goes to its first maximal element (row-major order
// within the window: the first element equal to the window's y), summed over windows.
// Deterministic on the GPU: one thread per dx element gathers its windows in order, no atomics.
const ir::OpDef& MaxPool2dGradOp();

// global_avg_pool: (x [N,C,H,W] or [N,H,W,C]) -> [N, C], the mean over H and W; attr layout.
const ir::OpDef& GlobalAvgPoolOp();
// (dy [N, C]) -> dx, each element dy[n, c] / (H·W); attrs layout, height, width (int64).
const ir::OpDef& GlobalAvgPoolGradOp();

// flatten: (x [d0, d1, ...], rank >= 2) -> [d0, d1·d2·...], the same elements in stored order.
// Its gradient is a reshape back to x's shape.
const ir::OpDef& FlattenOp();
// reshape: (x) -> the same elements with attr "shape" (string, e.g. "32,2048,1,1"); the element
// count must not change. Its gradient is a reshape back. On the GPU both are one device-to-device
// copy (the memory plan gives the output its own buffer).
const ir::OpDef& ReshapeOp();

// Shared by the image ops --------------------------------------------------------------------

// The "layout" attr: "NCHW" (also when absent) or "NHWC"; InvalidArgument otherwise.
absl::StatusOr<Layout> LayoutAttr(const Attrs& attrs);

// Logical extents of an image tensor and where element (n, c, h, w) lies in its storage.
struct ImageDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
  Layout layout = Layout::kNCHW;

  int64_t NumElements() const { return n * c * h * w; }
  int64_t Index(int64_t in, int64_t ic, int64_t ih, int64_t iw) const {
    return layout == Layout::kNCHW ? ((in * c + ic) * h + ih) * w + iw
                                   : ((in * h + ih) * w + iw) * c + ic;
  }
  Shape ToShape() const { return layout == Layout::kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c}; }
};

// Reads x's extents in `layout`; InvalidArgument naming `what` and its spec unless x is a 4-D
// float tensor.
absl::StatusOr<ImageDims> ImageDimsOf(const TensorSpec& x, Layout layout, absl::string_view what);

// Unimplemented, naming the node and the spec, unless every spec is float32: for GPU lowerings
// that are fp32 only (float64 exists for CPU reference checks). The pooling ops themselves run in
// float32, bfloat16 or float16 (GpuElementType in src/ops/gpu_element_type.h).
absl::Status CheckGpuFloat32(const Node& node, absl::Span<const TensorSpec> specs);

// Shared by the max-pooling ops (here and src/ops/pooling_bn_relu.h) ---------------------------

// A max pooling's window, from its attrs (kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w,
// layout); InvalidArgument for a window PyTorch would refuse.
struct PoolParams {
  int64_t kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0;
  Layout layout = Layout::kNCHW;
};
absl::StatusOr<PoolParams> PoolParamsOf(const Attrs& attrs);

// The extents of y for x (whose spec is `spec`), or InvalidArgument when the window leaves no
// output.
absl::StatusOr<ImageDims> PooledDims(const ImageDims& x, const PoolParams& p,
                                     const TensorSpec& spec);

class KernelArgs;
// Appends the arguments every max-pooling kernel ends with: extents, window, layout.
void AddPoolShape(KernelArgs& args, const ImageDims& x, const ImageDims& y, const PoolParams& p);
// The same sizes, for kernels that compile them in (codegen::PoolSizes).
codegen::PoolSizes PoolSizesOf(const ImageDims& x, const ImageDims& y, const PoolParams& p);

// The kernels with sizes compiled in that a max-pooling node of `graph` (max_pool2d, its gradient
// or the argmax forms, src/ops/pooling_bn_relu.h) may launch: the channels-last ones at its shape
// and element type, for warming the kernel store before lowering. None for other nodes.
std::vector<codegen::GeneratedKernel> SizedPoolingKernelsOf(const Graph& graph, const Node& node);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_POOLING_H_
