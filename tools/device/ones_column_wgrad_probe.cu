// Whether a linear layer's bias gradient can ride in its weight-gradient product for free: with
// the layer's input X stored as [rows, in + 8] whose column `in` holds ones (the rest of the pad
// zeros), dYᵀ·[X 1] is [out, in + 8] and its column `in` is the bias gradient, the column sums
// of dY, read once by the product instead of again by a column-sum kernel.
// For GPT-2 124M's c_attn (in 768, out 2304) and c_fc (in 768, out 3072) at 16384 rows, with
// bfloat16 operands and float32 accumulation, this times (best of cuBLASLt's first eight
// heuristic configurations, as the engine's measured choice picks):
//   the plain weight gradient, m = in;
//   the product over [X 1] at m = in + 1 and m = in + 8 (lda and ldd in + 8);
//   a column-sum kernel over dY (float32 sums), what the ones column would replace;
// and checks the ones column's sums against that kernel's. Then the other half of the form's
// cost: the layers' forward products reading X at a leading dimension of in + 8 instead of in
// (c_attn with cuBLASLt's BIAS epilogue, c_fc with GELU_AUX_BIAS), best of eight each, and
// whether they give the same bits.
// Not part of the build:
//   nvcc -O2 -std=c++20 -arch=sm_90 -Itools/device -o ones_column_wgrad_probe \
//     tools/device/ones_column_wgrad_probe.cu -lcublasLt
// then `./ones_column_wgrad_probe [ROWS]` (default 16384, GPT-2 124M at B=16, T=1024).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "graph_timing.cuh"
#include "lt_probe_util.cuh"

namespace {

constexpr size_t kWorkspace = 64u << 20;

// Column `column` of every row of x ([rows, ld]) set to one.
__global__ void SetOnesColumn(__nv_bfloat16* x, int64_t rows, int64_t ld, int64_t column) {
  for (int64_t r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    x[r * ld + column] = __float2bfloat16(1.0f);
  }
}

// sums[c] = Σ_r dy[r, c], float32: blocks of 256 columns by 256 rows, one atomic add per column
// and block.
__global__ void ColumnSums(const __nv_bfloat16* dy, int64_t rows, int64_t cols, float* sums) {
  const int64_t c = blockIdx.x * 256 + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * 256;
  const int64_t r1 = r0 + 256 < rows ? r0 + 256 : rows;
  float s = 0;
  for (int64_t r = r0; r < r1; ++r) s += __bfloat162float(dy[r * cols + c]);
  atomicAdd(&sums[c], s);
}

// cuBLASLt's first eight configurations for the product (C = D), within kWorkspace; how many.
int HeuristicChoices(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                     cublasLtMatmulHeuristicResult_t (&choices)[8]) {
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &kWorkspace, sizeof(kWorkspace)));
  int found = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, 8, choices, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  return found;
}

// The median ms of the fastest of `found` configurations, each run by `run(i)`; -1 when none
// ran. `best` gets its index.
template <typename Run>
double FastestConfiguration(cudaStream_t s, int found, int& best, Run&& run) {
  double fastest = -1;
  for (int i = 0; i < found; ++i) {
    const double t = MedianMsPerRun(s, [&] { return run(i); });
    if (t > 0 && (fastest < 0 || t < fastest)) fastest = t, best = i;
  }
  return fastest;
}

// Column-major D[m, n] = A[m, k]·op(B) with B stored [n, k] (ld ldb) and transposed: the
// weight gradient dWᵀ = Xᵀ·dY in cuBLASLt's terms, X row-major [k, lda], dY row-major [k, n].
struct WeightGradient {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulHeuristicResult_t choices[8];
  int found = 0;
  int best = 0;

  WeightGradient(cublasLtHandle_t lt, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldd) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_t, sizeof(op_t)));
    LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, m, k, lda));
    LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, n, k, n));
    LT(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, n, ldd));
    found = HeuristicChoices(lt, desc, a, b, d, choices);
  }
  bool Run(cublasLtHandle_t lt, int choice, const void* x, const void* dy, void* dw,
           void* workspace, cudaStream_t s) const {
    const float one = 1, zero = 0;
    return cublasLtMatmul(lt, desc, &one, x, a, dy, b, &zero, dw, d, dw, d, &choices[choice].algo,
                          workspace, kWorkspace, s) == CUBLAS_STATUS_SUCCESS;
  }
  // The best configuration's median ms (and sets `best`).
  double Time(cublasLtHandle_t lt, const void* x, const void* dy, void* dw, void* workspace,
              cudaStream_t s) {
    return FastestConfiguration(s, found, best,
                                [&](int i) { return Run(lt, i, x, dy, dw, workspace, s); });
  }
};

__global__ void BiasColumnToFloat(const __nv_bfloat16* dw, int64_t out, int64_t ld, int64_t column,
                                  float* bias) {
  const int64_t o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o < out) bias[o] = __bfloat162float(dw[o * ld + column]);
}

// Column-major Y[out, rows] = Wᵀ·X + bias (GELU'd with its pre-activation kept when `gelu`):
// a linear layer's forward, W stored row-major [out, in] (column-major [in, out], transposed)
// and X row-major [rows, in] at leading dimension `ldx` (column-major [in, rows]).
struct ForwardProduct {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulHeuristicResult_t choices[8];
  int found = 0;

  ForwardProduct(cublasLtHandle_t lt, int64_t out, int64_t rows, int64_t in, int64_t ldx,
                 const void* bias, void* pre, bool gelu) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
    const cublasLtEpilogue_t epilogue =
        gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                      sizeof(epilogue)));
    const cudaDataType_t bias_type = CUDA_R_16BF;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                      sizeof(bias_type)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                      sizeof(bias)));
    if (gelu) {
      LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre,
                                        sizeof(pre)));
      LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &out,
                                        sizeof(out)));
    }
    LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, in, out, in));
    LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, in, rows, ldx));
    LT(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, out, rows, out));
    found = HeuristicChoices(lt, desc, a, b, d, choices);
  }
  bool Run(cublasLtHandle_t lt, int choice, const void* w, const void* x, void* y, void* workspace,
           cudaStream_t s) const {
    const float one = 1, zero = 0;
    return cublasLtMatmul(lt, desc, &one, w, a, x, b, &zero, y, d, y, d, &choices[choice].algo,
                          workspace, kWorkspace, s) == CUBLAS_STATUS_SUCCESS;
  }
  // The best configuration's median ms; `best` gets its index.
  double Time(cublasLtHandle_t lt, const void* w, const void* x, void* y, void* workspace,
              cudaStream_t s, int& best) const {
    return FastestConfiguration(s, found, best,
                                [&](int i) { return Run(lt, i, w, x, y, workspace, s); });
  }
};

// c_attn's and c_fc's forward products at ldx = in and in + 8: times, and whether the padded
// read gives the unpadded one's bits (each with its own fastest configuration).
void TimeForwardProducts(cublasLtHandle_t lt, void* workspace, cudaStream_t s, int64_t rows,
                         int64_t in) {
  const int64_t padded = in + 8;
  for (const auto& [out, gelu] :
       {std::pair{int64_t{2304}, false}, std::pair{int64_t{3072}, true}}) {
    __nv_bfloat16 *x, *x_padded, *w, *bias, *y[2], *pre;
    CK(cudaMalloc(&x, rows * in * 2));
    CK(cudaMalloc(&x_padded, rows * padded * 2));
    CK(cudaMalloc(&w, out * in * 2));
    CK(cudaMalloc(&bias, out * 2));
    CK(cudaMalloc(&y[0], rows * out * 2));
    CK(cudaMalloc(&y[1], rows * out * 2));
    CK(cudaMalloc(&pre, rows * out * 2));
    FillBf16<<<1024, 256>>>(x, rows * in, 3, 1.0f);
    FillBf16<<<1024, 256>>>(w, out * in, 4, 0.05f);
    FillBf16<<<64, 256>>>(bias, out, 5, 0.1f);
    CK(cudaMemset(x_padded, 0, rows * padded * 2));
    CK(cudaMemcpy2D(x_padded, padded * 2, x, in * 2, in * 2, rows, cudaMemcpyDeviceToDevice));
    SetOnesColumn<<<256, 256>>>(x_padded, rows, padded, in);
    CK(cudaDeviceSynchronize());
    double t[2];
    for (int v = 0; v < 2; ++v) {
      const ForwardProduct product(lt, out, rows, in, v == 0 ? in : padded, bias, pre, gelu);
      int best = 0;
      t[v] = product.Time(lt, w, v == 0 ? x : x_padded, y[v], workspace, s, best);
      if (t[v] < 0 || !product.Run(lt, best, w, v == 0 ? x : x_padded, y[v], workspace, s)) {
        printf("forward out %lld, ld %lld: no configuration ran\n", static_cast<long long>(out),
               static_cast<long long>(v == 0 ? in : padded));
        t[v] = -1;
      }
    }
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> a(rows * out), b(rows * out);
    CK(cudaMemcpy(a.data(), y[0], rows * out * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), y[1], rows * out * 2, cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (int64_t i = 0; i < rows * out; ++i) differ += a[i] != b[i];
    printf(
        "forward out %lld (%s): ld %lld %.4f ms, ld %lld %.4f ms (%+.4f); %lld of %lld values "
        "differ\n",
        static_cast<long long>(out), gelu ? "GELU_AUX_BIAS" : "BIAS", static_cast<long long>(in),
        t[0], static_cast<long long>(padded), t[1], t[1] - t[0], static_cast<long long>(differ),
        static_cast<long long>(rows * out));
    void* buffers[] = {x, x_padded, w, bias, y[0], y[1], pre};
    for (void* p : buffers) CK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 16384;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, rows %lld\n", prop.name, static_cast<long long>(rows));
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* workspace;
  CK(cudaMalloc(&workspace, kWorkspace));
  constexpr int64_t in = 768, padded = in + 8;
  double total_plain = 0, total_sums = 0, total_ones[2] = {0, 0};
  for (int64_t out : {int64_t{2304}, int64_t{3072}}) {
    __nv_bfloat16 *x, *x_padded, *dy, *dw;
    float *sums, *bias;
    CK(cudaMalloc(&x, rows * in * 2));
    CK(cudaMalloc(&x_padded, rows * padded * 2));
    CK(cudaMalloc(&dy, rows * out * 2));
    CK(cudaMalloc(&dw, out * padded * 2));
    CK(cudaMalloc(&sums, out * 4));
    CK(cudaMalloc(&bias, out * 4));
    FillBf16<<<1024, 256>>>(x, rows * in, 1, 1.0f);
    CK(cudaMemset(x_padded, 0, rows * padded * 2));
    CK(cudaMemcpy2D(x_padded, padded * 2, x, in * 2, in * 2, rows, cudaMemcpyDeviceToDevice));
    SetOnesColumn<<<256, 256>>>(x_padded, rows, padded, in);
    FillBf16<<<1024, 256>>>(dy, rows * out, 2, 0.01f);
    CK(cudaDeviceSynchronize());

    WeightGradient plain(lt, in, out, rows, in, in);
    const double t_plain = plain.Time(lt, x, dy, dw, workspace, s);
    const dim3 grid((out + 255) / 256, (rows + 255) / 256);
    const double t_sums = MedianMsPerRun(s, [&] {
      cudaMemsetAsync(sums, 0, out * 4, s);
      ColumnSums<<<grid, 256, 0, s>>>(dy, rows, out, sums);
      return true;
    });
    printf("out %lld: weight gradient %.4f ms (%d configurations), column sums %.4f ms\n",
           static_cast<long long>(out), t_plain, plain.found, t_sums);
    total_plain += t_plain;
    total_sums += t_sums;
    std::vector<float> want(out), got(out);
    CK(cudaMemcpy(want.data(), sums, out * 4, cudaMemcpyDeviceToHost));
    int variant = 0;
    for (int64_t m : {in + 1, padded}) {
      WeightGradient ones(lt, m, out, rows, padded, padded);
      if (ones.found == 0) {
        printf("  m = %lld: no configuration\n", static_cast<long long>(m));
        ++variant;
        continue;
      }
      const double t = ones.Time(lt, x_padded, dy, dw, workspace, s);
      CK(cudaDeviceSynchronize());
      BiasColumnToFloat<<<(out + 255) / 256, 256>>>(dw, out, padded, in, bias);
      CK(cudaMemcpy(got.data(), bias, out * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int64_t o = 0; o < out; ++o) {
        worst = fmax(worst, fabs(got[o] - want[o]) / (fabs(want[o]) + 1e-2));
      }
      printf(
          "  with the ones column, m = %lld: %.4f ms (%+.4f against plain; the sums %.4f), "
          "worst relative bias error %.2e\n",
          static_cast<long long>(m), t, t - t_plain, t_sums, worst);
      total_ones[variant++] += t;
    }
    void* buffers[] = {x, x_padded, dy, dw, sums, bias};
    for (void* p : buffers) CK(cudaFree(p));
  }
  printf("per layer: plain + sums %.4f ms; ones column m = in + 1 %.4f, m = in + 8 %.4f\n",
         total_plain + total_sums, total_ones[0], total_ones[1]);
  TimeForwardProducts(lt, workspace, s, rows, in);
  return 0;
}
