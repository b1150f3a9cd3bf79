// CUDA C++ source for the kernels the fuse pass creates: chains of pointwise ops (with an
// optional bias-gradient column sum), the loss with its gradient, and the multi-tensor SGD.
#ifndef REPRISE_SRC_CODEGEN_FUSED_KERNELS_H_
#define REPRISE_SRC_CODEGEN_FUSED_KERNELS_H_

#include <string>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// A chain of pointwise steps over one output shape [rows, cols]. Step k defines the float
// variable s<k> from an expression over the inputs in0, in1, ... and earlier steps.
struct FusedPointwiseSpec {
  std::vector<Broadcast> inputs;         // kFull or kRow, one per input.
  std::vector<std::string> expressions;  // Step k's expression, already over in<i> and s<j>.
  std::vector<int> outputs;              // Steps stored, in output order.
  int column_sum = -1;                   // Step whose column sums are the last output, or -1.
  // What every input and output holds: float32, bfloat16 or float16 (src/codegen/element_type.h).
  // The steps compute in float either way; 16-bit types round only where a value is stored, so a
  // chain of several steps can differ from its unfused 16-bit ops by their intermediate roundings.
  DType dtype = DType::kFloat32;
};

// The kernel is named ElementKernelName("reprise_fused_pointwise[_colsum]", spec.dtype). Without
// a column sum: a grid-stride loop, signature (const elem_t* in..., elem_t* out..., long long n,
// long long cols). With one: ColumnSumKernel (src/codegen/column_sum_kernels.h), summing rows in
// the same order as ColumnSum() (so the float32 bits match the unfused kernels); signature
// (const elem_t* in..., elem_t* out..., elem_t* column_sum, float* partial, long long rows,
// long long cols, long long rows_per_block, int vector).
GeneratedKernel FusedPointwise(const FusedPointwiseSpec& spec);

// The loss and its gradient in one block: loss[0] as SoftmaxCrossEntropy(), dz as
// SoftmaxCrossEntropyGrad(), bit for bit. Signature: (const float* z, const int* labels,
// const float* dloss, float* loss, float* dz, int rows, int cols); shared memory rows floats.
GeneratedKernel SoftmaxCrossEntropyWithGrad();

// SGD with momentum over up to kSgdTableSize tensors per launch, element for element the same
// arithmetic as SgdMomentum(). blockIdx.y picks the tensor. Signature: (SgdTable table,
// const float* lr, const float* mu, const float* wd), where SgdTable is
// { float* w[N]; const grad_t* g[N]; float* v[N]; long long n[N]; }, the gradients of type
// `gradient` (float32, or bfloat16 / float16 widened exactly on load; GradientType in
// gradient_loads.h); kernel name ElementKernelName("reprise_sgd_momentum_multi", gradient).
inline constexpr int kSgdTableSize = 32;
GeneratedKernel SgdMomentumMulti(DType gradient = DType::kFloat32);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_FUSED_KERNELS_H_
