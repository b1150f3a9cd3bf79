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

// refresh_copies: (p_0, ..., p_{n-1} float32 parameters, c_0, ..., c_{n-1} their copies of attr
// "dtype" (bf16 or f16), stale: i32 scalar) -> nothing; writes each c_t = cast(p_t) in place, as
// cast_multi would, but only where stale is nonzero. The copies are state that the update keeps
// current (adam_multi's attr "copies", src/passes/parameter_copies.h), which clears the flag; its
// GPU kernel's Settle sets it, so a step after the host wrote the parameters rounds them again.
const ir::OpDef& RefreshCopiesOp();
// InvalidArgument unless `flag` is refresh_copies' stale flag: an i32 scalar.
absl::Status CheckStaleFlag(const TensorSpec& flag);

// Whether `v` is a parameter, or a parameter cast (any number of times) as mixed precision reads
// it: a value whose gradient ends a weight-gradient chain, so that gradient's node may take role
// "wgrad" (the weight-gradient lane, src/passes/schedule.h).
bool IsParameterOrItsCast(const Graph& g, Value v);

// The type a cast (cast_multi, refresh_copies) converts to: its attribute "dtype".
absl::StatusOr<DType> CastTargetOf(const Attrs& attrs);

// The "dtype" attribute's value for a float type, and back; InvalidArgument for a name that is not
// a float type.
std::string DTypeAttr(DType dtype);
absl::StatusOr<DType> ParseFloatDType(absl::string_view name);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CAST_H_
