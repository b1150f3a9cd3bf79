// GELU in its tanh form (PyTorch's gelu(approximate='tanh')) and its derivative, as pointwise
// expressions: the op table's PointwiseForm (so that fused pointwise chains can hold them) and the
// stand-alone kernels are built from the same text, so both compute the same bits. PointwiseTanh
// and PointwiseGeluSlope (element_type.h): tanhf in float32 kernels, the hardware's approximation
// in 16-bit ones.
//   gelu(x)  = 0.5·x·(1 + tanh(k·(x + a·x³))),  k = sqrt(2/π), a = 0.044715
//   gelu'(x) = 0.5·(1 + t) + 0.5·x·(1 - t²)·k·(1 + 3a·x²),  t = tanh(k·(x + a·x³))
#ifndef REPRISE_SRC_CODEGEN_GELU_KERNELS_H_
#define REPRISE_SRC_CODEGEN_GELU_KERNELS_H_

#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Over $0 = x.
inline constexpr char kGeluExpression[] =
    "(0.5f * $0 * (1.0f + PointwiseTanh(0.7978845608f * ($0 + 0.044715f * $0 * $0 * $0))))";
// Over $0 = dy, $1 = x: dy·gelu'(x) (PointwiseGeluSlope, element_type.h).
inline constexpr char kGeluGradExpression[] = "($0 * PointwiseGeluSlope($1))";

// Pointwise kernels (generated_kernel.h's signature) named reprise_gelu and reprise_gelu_grad
// (inputs dy, x).
GeneratedKernel Gelu(DType dtype = DType::kFloat32);
GeneratedKernel GeluGrad(DType dtype = DType::kFloat32);

// Both for every kernel element type.
std::vector<GeneratedKernel> GeluKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_GELU_KERNELS_H_
