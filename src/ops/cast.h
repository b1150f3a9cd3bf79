// cast: (x) -> x converted to the element type in attr "dtype" ("f32", "bf16", "f16"; "f64" on
// the CPU), rounding to nearest even. Its gradient casts dy back to x's type. The mixed-precision
// pass (src/passes/mixed_precision.h) puts casts where float32 master weights meet 16-bit compute.
#ifndef REPRISE_SRC_OPS_CAST_H_
#define REPRISE_SRC_OPS_CAST_H_

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

const ir::OpDef& CastOp();

// cast_multi: (x_0, ..., x_{n-1}) float32 -> each converted to attr "dtype" (bf16 or f16) as cast
// converts it, in one launch per codegen::kMaxMultiTensorCapacity tensors. The fuse pass makes it
// from mixed precision's casts of the float32 parameters to their 16-bit copies.
const ir::OpDef& CastMultiOp();

// Whether `v` is a parameter, or a parameter cast (any number of times) as mixed precision reads
// it: a value whose gradient ends a weight-gradient chain, so that gradient's node may take role
// "wgrad" (the weight-gradient lane, src/passes/schedule.h).
bool IsParameterOrItsCast(const Graph& g, Value v);

// The "dtype" attribute's value for a float type, and back; InvalidArgument for a name that is not
// a float type.
std::string DTypeAttr(DType dtype);
absl::StatusOr<DType> ParseFloatDType(absl::string_view name);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CAST_H_
