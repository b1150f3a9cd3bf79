// Device source shared by the kernels that read gradients of several types (the optimizers'
// updates, the fused optimizer chains): the types Bf16Grad and F16Grad (16-bit gradients, told
// apart by overloads) and GradValue(g, i), GradQuad(g, q) (elements 4q .. 4q+3 in one load) and
// GradAligned(g) for float, Bf16Grad and F16Grad.
#ifndef REPRISE_SRC_CODEGEN_GRADIENT_LOADS_H_
#define REPRISE_SRC_CODEGEN_GRADIENT_LOADS_H_

#include <string>

#include "reprise/tensor.h"

namespace reprise::codegen {

// The definitions above, to prepend to a kernel's source.
std::string GradientLoads();
// A gradient dtype's device type: "float", "Bf16Grad" or "F16Grad".
std::string GradientType(DType gradient);
// A gradient dtype's code in the multi-tensor kernels' kind tables: 0 float32, 1 bfloat16,
// 2 float16.
unsigned char GradientKind(DType gradient);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_GRADIENT_LOADS_H_
