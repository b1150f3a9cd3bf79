// Host conversions between float32 and the 16-bit floats, rounding to nearest even as the GPU's
// conversion instructions do, so the CPU reference and the kernels agree on every bit.
#ifndef REPRISE_SRC_IR_LOW_PRECISION_H_
#define REPRISE_SRC_IR_LOW_PRECISION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "reprise/tensor.h"
#include "src/ir/host_tensor.h"

namespace reprise::ir {

uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);

// The element at `i` of a float tensor of any float dtype, as a double.
double FloatElement(const HostTensor& t, int64_t i);
// Writes `value` (rounded to the tensor's dtype) at `i`.
void SetFloatElement(HostTensor& t, int64_t i, double value);

// Copies `from` into `to` (same shape, both float dtypes), converting each element.
absl::Status ConvertFloats(const HostTensor& from, HostTensor& to);

// Rounds `t`'s values to `stored` in place where `stored` is a 16-bit float and `t` is not: a
// fused op's reference, which the reference executor runs in float32, rounding an intermediate
// value as the kernel (or the separate op it replaces) stores it. Otherwise nothing.
absl::Status RoundToStored(DType stored, HostTensor& t);

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_LOW_PRECISION_H_
