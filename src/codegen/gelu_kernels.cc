#include "src/codegen/gelu_kernels.h"

#include "absl/strings/str_replace.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {

GeneratedKernel Gelu(DType dtype) {
  return Pointwise("reprise_gelu", {{"x", Broadcast::kFull}},
                   absl::StrReplaceAll(kGeluExpression, {{"$0", "x"}}), dtype);
}

GeneratedKernel GeluGrad(DType dtype) {
  return Pointwise("reprise_gelu_grad", {{"dy", Broadcast::kFull}, {"x", Broadcast::kFull}},
                   absl::StrReplaceAll(kGeluGradExpression, {{"$0", "dy"}, {"$1", "x"}}), dtype);
}

std::vector<GeneratedKernel> GeluKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    kernels.push_back(Gelu(dtype));
    kernels.push_back(GeluGrad(dtype));
  }
  return kernels;
}

}  // namespace reprise::codegen
