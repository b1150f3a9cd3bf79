// CUDA C++ source for kernels that NVRTC compiles at Trainer creation. Generated sources take
// their sizes as arguments, so one compiled kernel serves every shape.
#ifndef REPRISE_SRC_CODEGEN_GENERATED_KERNEL_H_
#define REPRISE_SRC_CODEGEN_GENERATED_KERNEL_H_

#include <string>
#include <vector>

#include "reprise/tensor.h"

namespace reprise::codegen {

struct GeneratedKernel {
  std::string name;  // The extern "C" __global__ function in `code`.
  std::string code;
};

// How an input of a pointwise kernel is indexed by the flat output index i.
enum class Broadcast { kFull, kRow /* in[i % cols] */, kScalar /* in[0] */ };

struct PointwiseInput {
  std::string name;  // The variable the expression reads.
  Broadcast broadcast = Broadcast::kFull;
};

// out[i] = expression(inputs at i) for i < n, the tensors of `dtype` (float32, bfloat16 or float16;
// see src/codegen/element_type.h). `expression` is CUDA C++ over the input names as float values,
// e.g. "fmaxf(x, 0.0f)"; the result is rounded once, at the store. The kernel is named
// ElementKernelName(name, dtype). Signature: (const elem_t* in..., elem_t* out, long long n,
// long long cols).
GeneratedKernel Pointwise(const std::string& name, const std::vector<PointwiseInput>& inputs,
                          const std::string& expression, DType dtype = DType::kFloat32);

// The pointwise kernels the ops use, each a Pointwise() instance, float32, bfloat16 or
// float16.
GeneratedKernel BiasAdd(DType dtype = DType::kFloat32);   // x + b (b by row)
GeneratedKernel Relu(DType dtype = DType::kFloat32);      // max(x, 0), a NaN kept
GeneratedKernel ReluGrad(DType dtype = DType::kFloat32);  // y > 0 ? dy : 0, inputs (dy, y)
GeneratedKernel Add(DType dtype = DType::kFloat32);       // a + b

// db[c] = sum over r of dy[r, c], dy row-major [rows, cols]; fixed summation order, in float
// for either element type (16-bit types round once, at the store): ColumnSumKernel
// (src/codegen/column_sum_kernels.h) of the one-step chain dy. Signature: (const elem_t* dy,
// elem_t* db, float* partial, long long rows, long long cols, long long rows_per_block,
// int vector), launched as column_sum_kernels.h says.
GeneratedKernel ColumnSum(DType dtype = DType::kFloat32);

// loss[0] = mean over rows of logsumexp(z[r, :]) - z[r, label[r]]; one block, fixed order.
// Signature: (const float* z, const int* labels, float* loss, int rows, int cols).
GeneratedKernel SoftmaxCrossEntropy();

// dz[r, c] = dloss[0] * (softmax(z[r, :])[c] - (c == label[r])) / rows; one warp per row.
// Signature: (const float* z, const int* labels, const float* dloss, float* dz, int rows, int
// cols).
GeneratedKernel SoftmaxCrossEntropyGrad();

// PyTorch's SGD with momentum, in place: g' = g + wd·w; v = mu·v + g'; w = w - lr·v.
// Signature: (float* w, const float* g, float* v, const float* lr, const float* mu,
// const float* wd, long long n).
GeneratedKernel SgdMomentum();

// Device helpers every loss kernel uses, so fused and unfused losses compute the same bits:
// RowMaxAndSumExp(zr, cols, lane, m, s) (one warp's max and Σ exp(z - max) over a row),
// RowLoss(zr, cols, label, m, s), RowGradient(zr, dzr, cols, lane, label, m, s, scale) and
// MeanOfRows(row_loss, rows).
const std::string& LossRowHelpersSource();

// Every kernel source the engine can generate, for compile checks and prefetching: the
// pointwise kernels and the column sum in float32, bfloat16 and float16.
std::vector<GeneratedKernel> AllKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_GENERATED_KERNEL_H_
