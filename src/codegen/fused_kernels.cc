#include "src/codegen/fused_kernels.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/column_sum_kernels.h"
#include "src/codegen/element_type.h"
#include "src/codegen/gradient_loads.h"

namespace reprise::codegen {
namespace {

// Declarations of the loaded inputs and the computed steps for element (row r, column c) at
// flat index i.
std::string ElementBody(const FusedPointwiseSpec& spec) {
  std::string body;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    absl::StrAppend(&body, "    const float in", i, " = ToFloat(in", i, "_ptr[",
                    spec.inputs[i] == Broadcast::kRow ? "c" : "i", "]);\n");
  }
  for (size_t k = 0; k < spec.expressions.size(); ++k) {
    absl::StrAppend(&body, "    const float s", k, " = ", spec.expressions[k], ";\n");
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    absl::StrAppend(&body, "    out", o, "[i] = FromFloat(s", spec.outputs[o], ");\n");
  }
  return body;
}

std::vector<std::string> Parameters(const FusedPointwiseSpec& spec) {
  std::vector<std::string> params;
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    params.push_back(absl::StrCat("const elem_t* __restrict__ in", i, "_ptr"));
  for (size_t o = 0; o < spec.outputs.size(); ++o)
    params.push_back(absl::StrCat("elem_t* __restrict__ out", o));
  return params;
}

}  // namespace

GeneratedKernel FusedPointwise(const FusedPointwiseSpec& spec) {
  std::vector<std::string> params = Parameters(spec);
  if (spec.column_sum < 0) {
    const std::string name = ElementKernelName("reprise_fused_pointwise", spec.dtype);
    params.push_back("long long n");
    params.push_back("long long cols");
    return {name,
            absl::StrCat(ElementTypeSource(spec.dtype), "extern \"C\" __global__ void ", name, "(",
                         absl::StrJoin(params, ", "), ") {\n",
                         "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                         "i < n;\n",
                         "       i += (long long)gridDim.x * blockDim.x) {\n",
                         "    const long long c = i % cols;\n    (void)c;\n", ElementBody(spec),
                         "  }\n}\n")};
  }
  // The column-sum form is ColumnSum()'s kernel with the chain in it (column_sum_kernels.h): the
  // same walk, so each partial sum and the final sum happen in the same order. It sums the steps'
  // float values, as the CPU reference of the fused node does, and rounds the total once.
  return ColumnSumKernel(ElementKernelName("reprise_fused_pointwise_colsum", spec.dtype), spec);
}

GeneratedKernel SoftmaxCrossEntropyWithGrad() {
  return {"reprise_softmax_xent_with_grad", LossRowHelpersSource() + R"(
extern "C" __global__ void reprise_softmax_xent_with_grad(const float* __restrict__ z,
                                                          const int* __restrict__ labels,
                                                          const float* __restrict__ dloss,
                                                          float* __restrict__ loss,
                                                          float* __restrict__ dz, int rows,
                                                          int cols) {
  extern __shared__ float row_loss[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float scale = dloss[0] / rows;
  for (int r = warp; r < rows; r += warps) {
    const float* zr = z + (long long)r * cols;
    float* dzr = dz + (long long)r * cols;
    float m, s;
    RowMaxAndSumExp(zr, cols, lane, m, s);
    const int label = labels[r];
    if (lane == 0) row_loss[r] = RowLoss(zr, cols, label, m, s);
    RowGradient(zr, dzr, cols, lane, label, m, s, scale);
  }
  __syncthreads();
  if (threadIdx.x == 0) loss[0] = MeanOfRows(row_loss, rows);
}
)"};
}

GeneratedKernel SgdMomentumMulti(DType gradient) {
  const std::string size = absl::StrCat(kSgdTableSize);
  const std::string name = ElementKernelName("reprise_sgd_momentum_multi", gradient);
  return {name, absl::StrCat(GradientLoads(), "typedef ", GradientType(gradient), " grad_t;\n",
                             "struct SgdTable {\n  float* w[", size, "];\n  const grad_t* g[", size,
                             "];\n  float* v[", size, "];\n  long long n[", size,
                             "];\n};\nextern \"C\" __global__ void ", name, R"((
    SgdTable table, const float* __restrict__ lr, const float* __restrict__ mu,
    const float* __restrict__ wd) {
  const int t = blockIdx.y;
  float* __restrict__ w = table.w[t];
  const grad_t* __restrict__ g = table.g[t];
  float* __restrict__ v = table.v[t];
  const long long n = table.n[t];
  const float rate = lr[0], momentum = mu[0], decay = wd[0];
  const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  // Four elements per thread, one 16-byte access per float array (and one aligned load of the
  // gradient) where all are aligned (scalar accesses reached ~77% of a device copy's bandwidth on
  // an H100); the same arithmetic per element, so the same bits. The tail and unaligned tensors
  // go one by one.
  long long done = 0;
  if ((((unsigned long long)w | (unsigned long long)v) & 15ull) == 0ull && GradAligned(g)) {
    done = n / 4 * 4;
    for (long long q = first; q < n / 4; q += stride) {
      float4 w4 = ((float4*)w)[q], v4 = ((float4*)v)[q];
      const float4 g4 = GradQuad(g, q);
      float* wk = &w4.x;
      float* vk = &v4.x;
      const float* gk = &g4.x;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float grad = __fadd_rn(gk[k], __fmul_rn(decay, wk[k]));
        vk[k] = __fadd_rn(__fmul_rn(momentum, vk[k]), grad);
        wk[k] = __fsub_rn(wk[k], __fmul_rn(rate, vk[k]));
      }
      ((float4*)w)[q] = w4;
      ((float4*)v)[q] = v4;
    }
  }
  for (long long i = done + first; i < n; i += stride) {
    const float grad = __fadd_rn(GradValue(g, i), __fmul_rn(decay, w[i]));
    const float vel = __fadd_rn(__fmul_rn(momentum, v[i]), grad);
    v[i] = vel;
    w[i] = __fsub_rn(w[i], __fmul_rn(rate, vel));
  }
}
)")};
}

}  // namespace reprise::codegen
