// Which element type a generated-kernel lowering runs in: float32, or bfloat16 or float16 stored
// as their 16 bits and computed in float (src/codegen/element_type.h). Lowerings call this before
// building a kernel so that a tensor of another type, or a mix of types, is refused by name instead
// of being read as the wrong bytes.
#ifndef REPRISE_SRC_OPS_GPU_ELEMENT_TYPE_H_
#define REPRISE_SRC_OPS_GPU_ELEMENT_TYPE_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"

namespace reprise::ops {

// The one element type of `inputs` and `node`'s outputs when it is float32, bfloat16 or float16.
// Unimplemented, naming the node, its op and the specs, for float64 or int32, or when the tensors
// do not all share one type.
absl::StatusOr<DType> GpuElementType(const Node& node, absl::Span<const TensorSpec> inputs);

// OK when every spec is float32: the kernels of the ensemble ops (src/codegen/batched_kernels.h)
// have no other type. Unimplemented naming the node, its op and the first other spec.
absl::Status RequireFloat32(const Node& node, absl::Span<const TensorSpec> specs);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_GPU_ELEMENT_TYPE_H_
