#include "src/codegen/generated_kernel.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/column_sum_kernels.h"
#include "src/codegen/element_type.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/random_kernels.h"

namespace reprise::codegen {

GeneratedKernel Pointwise(const std::string& name, const std::vector<PointwiseInput>& inputs,
                          const std::string& expression, DType dtype) {
  const std::string kernel = ElementKernelName(name, dtype);
  std::vector<std::string> params, loads;
  for (const PointwiseInput& in : inputs) {
    params.push_back(absl::StrCat("const elem_t* __restrict__ ", in.name, "_ptr"));
    const char* index = in.broadcast == Broadcast::kFull  ? "i"
                        : in.broadcast == Broadcast::kRow ? "i % cols"
                                                          : "0";
    loads.push_back(
        absl::StrCat("    const float ", in.name, " = ToFloat(", in.name, "_ptr[", index, "]);"));
  }
  params.push_back("elem_t* __restrict__ out");
  params.push_back("long long n");
  params.push_back("long long cols");
  std::string code = absl::StrCat(
      ElementTypeSource(dtype), "extern \"C\" __global__ void ", kernel, "(",
      absl::StrJoin(params, ", "), ") {\n", "  (void)cols;\n",
      "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n",
      "       i += (long long)gridDim.x * blockDim.x) {\n", absl::StrJoin(loads, "\n"), "\n",
      "    out[i] = FromFloat(", expression, ");\n", "  }\n}\n");
  return {kernel, std::move(code)};
}

GeneratedKernel BiasAdd(DType dtype) {
  return Pointwise("reprise_bias_add", {{"x", Broadcast::kFull}, {"b", Broadcast::kRow}}, "x + b",
                   dtype);
}
GeneratedKernel Relu(DType dtype) {
  return Pointwise("reprise_relu", {{"x", Broadcast::kFull}}, "x > 0.0f || x != x ? x : 0.0f",
                   dtype);
}
GeneratedKernel ReluGrad(DType dtype) {
  return Pointwise("reprise_relu_grad", {{"dy", Broadcast::kFull}, {"y", Broadcast::kFull}},
                   "y > 0.0f ? dy : 0.0f", dtype);
}
GeneratedKernel Add(DType dtype) {
  return Pointwise("reprise_add", {{"a", Broadcast::kFull}, {"b", Broadcast::kFull}}, "a + b",
                   dtype);
}

GeneratedKernel ColumnSum(DType dtype) {
  // The one-step chain "in0" summed: the fused kernels' column sum with nothing stored, so the
  // two add the same values in the same order.
  FusedPointwiseSpec spec{
      .inputs = {Broadcast::kFull}, .expressions = {"in0"}, .column_sum = 0, .dtype = dtype};
  return ColumnSumKernel(ElementKernelName("reprise_column_sum", dtype), spec);
}

// Device helpers of every loss kernel: one warp's max and Σ exp(z - max) over a row, the row's
// loss, its gradient, and the mean of the row losses in row order. Shared, so the loss kernels
// (fused or not) compute the same bits.
const std::string kLossRowHelpers = R"(
__device__ void RowMaxAndSumExp(const float* zr, int cols, int lane, float& m, float& s) {
  m = -__int_as_float(0x7f800000);
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, zr[c]);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  s = 0.0f;
  for (int c = lane; c < cols; c += 32) s += expf(zr[c] - m);
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
}
__device__ float RowLoss(const float* zr, int cols, int label, float m, float s) {
  return (label >= 0 && label < cols) ? logf(s) + m - zr[label] : __int_as_float(0x7fc00000);
}
__device__ void RowGradient(const float* zr, float* dzr, int cols, int lane, int label, float m,
                            float s, float scale) {
  for (int c = lane; c < cols; c += 32) {
    const float p = expf(zr[c] - m) / s;
    dzr[c] = scale * (p - (c == label ? 1.0f : 0.0f));
  }
}
__device__ float MeanOfRows(const float* row_loss, int rows) {
  float total = 0.0f;
  for (int r = 0; r < rows; ++r) total += row_loss[r];
  return total / rows;
}
)";

const std::string& LossRowHelpersSource() { return kLossRowHelpers; }

GeneratedKernel SoftmaxCrossEntropy() {
  // One block: each warp takes rows, writes per-row losses to shared memory, then thread 0 adds
  // them in row order so the sum never depends on scheduling.
  return {"reprise_softmax_xent", kLossRowHelpers + R"(
extern "C" __global__ void reprise_softmax_xent(const float* __restrict__ z,
                                                const int* __restrict__ labels,
                                                float* __restrict__ loss, int rows, int cols) {
  extern __shared__ float row_loss[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = warp; r < rows; r += warps) {
    const float* zr = z + (long long)r * cols;
    float m, s;
    RowMaxAndSumExp(zr, cols, lane, m, s);
    if (lane == 0) row_loss[r] = RowLoss(zr, cols, labels[r], m, s);
  }
  __syncthreads();
  if (threadIdx.x == 0) loss[0] = MeanOfRows(row_loss, rows);
}
)"};
}

GeneratedKernel SoftmaxCrossEntropyGrad() {
  return {"reprise_softmax_xent_grad", kLossRowHelpers + R"(
extern "C" __global__ void reprise_softmax_xent_grad(const float* __restrict__ z,
                                                     const int* __restrict__ labels,
                                                     const float* __restrict__ dloss,
                                                     float* __restrict__ dz, int rows, int cols) {
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const float* zr = z + (long long)r * cols;
  float* dzr = dz + (long long)r * cols;
  float m, s;
  RowMaxAndSumExp(zr, cols, lane, m, s);
  RowGradient(zr, dzr, cols, lane, labels[r], m, s, dloss[0] / rows);
}
)"};
}

GeneratedKernel SgdMomentum() {
  return {"reprise_sgd_momentum", R"(
extern "C" __global__ void reprise_sgd_momentum(float* __restrict__ w, const float* __restrict__ g,
                                                float* __restrict__ v, const float* __restrict__ lr,
                                                const float* __restrict__ mu,
                                                const float* __restrict__ wd, long long n) {
  const float rate = lr[0], momentum = mu[0], decay = wd[0];
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const float grad = __fadd_rn(g[i], __fmul_rn(decay, w[i]));
    const float vel = __fadd_rn(__fmul_rn(momentum, v[i]), grad);
    v[i] = vel;
    w[i] = __fsub_rn(w[i], __fmul_rn(rate, vel));
  }
}
)"};
}

std::vector<GeneratedKernel> AllKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    for (GeneratedKernel (*make)(DType) :
         {BiasAdd, Relu, ReluGrad, Add, ColumnSum, ColumnSumFinalize}) {
      kernels.push_back(make(dtype));
    }
  }
  for (GeneratedKernel kernel : {SoftmaxCrossEntropy(), SoftmaxCrossEntropyGrad(), SgdMomentum(),
                                 Dropout(), AdvanceStep()}) {
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

}  // namespace reprise::codegen
