// Whether GPT-2's output layer gets faster when its rows run in chunks on two streams, so that the
// memory-bound loss pass over one chunk's logits overlaps the compute-bound products of another.
// Today the step runs, on one lane: logits = x·Wᵀ ([rows, 768]·[50304, 768]ᵀ), the loss pass
// (read the logits, write their gradient in place) and the data gradient dx = dlogits·W.
// This times, with bfloat16 operands and float32 accumulation (cuBLASLt, heuristic's first
// configuration; the loss pass stood in for by a kernel that reads each row once into shared
// memory, finds its maximum and sum of exponentials and writes softmax back, as the step's does):
//   each piece alone at the full rows and per chunk;
//   the three in sequence on one stream (the step today);
//   C chunks: stream 0 runs every chunk's product, then every chunk's data gradient; stream 1 runs
//   chunk c's loss pass once its product is done, and stream 0's data gradient of chunk c waits
//   for it.
// Not part of the build:
//   nvcc -O2 -std=c++20 -arch=sm_90 -Itools/device -o lm_head_overlap_probe \
//     tools/device/lm_head_overlap_probe.cu -lcublasLt
// then `./lm_head_overlap_probe [ROWS]` (default 16384, GPT-2 124M at B=16, T=1024).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "graph_timing.cuh"
#include "lt_probe_util.cuh"

namespace {

constexpr int64_t kWidth = 768, kVocab = 50304;
constexpr size_t kWorkspace = 256u << 20;

// One block per row: the row into shared memory (16-byte loads), its maximum and sum of
// exponentials, softmax written back in place. 512 threads, kVocab * 2 bytes of shared memory.
__global__ void __launch_bounds__(512) SoftmaxRows(__nv_bfloat16* logits) {
  extern __shared__ uint4 row[];
  __shared__ float partial[16];
  constexpr int kVectors = kVocab / 8;
  uint4* g = reinterpret_cast<uint4*>(logits + static_cast<size_t>(blockIdx.x) * kVocab);
  float max = -INFINITY;
  for (int i = threadIdx.x; i < kVectors; i += blockDim.x) {
    const uint4 v = g[i];
    row[i] = v;
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
    for (int j = 0; j < 8; ++j) max = fmaxf(max, __bfloat162float(e[j]));
  }
  const auto block_reduce = [&](float x, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
      const float y = __shfl_xor_sync(0xffffffffu, x, o);
      x = is_max ? fmaxf(x, y) : x + y;
    }
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
    __syncthreads();
    x = partial[0];
    for (int w = 1; w < 16; ++w) x = is_max ? fmaxf(x, partial[w]) : x + partial[w];
    __syncthreads();
    return x;
  };
  max = block_reduce(max, true);
  float sum = 0;
  for (int i = threadIdx.x; i < kVectors; i += blockDim.x) {
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&row[i]);
    for (int j = 0; j < 8; ++j) sum += __expf(__bfloat162float(e[j]) - max);
  }
  const float inverse = 1.0f / block_reduce(sum, false);
  for (int i = threadIdx.x; i < kVectors; i += blockDim.x) {
    uint4 v = row[i];
    __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&v);
    for (int j = 0; j < 8; ++j) {
      e[j] = __float2bfloat16(__expf(__bfloat162float(e[j]) - max) * inverse);
    }
    g[i] = v;
  }
}

// A column-major cuBLASLt product D[m, n] = op(A)·B, the heuristic's first configuration.
struct Product {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulHeuristicResult_t choice;

  Product(cublasLtHandle_t lt, bool transpose_a, int64_t m, int64_t n, int64_t k, int64_t lda,
          int64_t ldb, int64_t ldd) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)));
    LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, transpose_a ? k : m, transpose_a ? m : k, lda));
    LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, n, ldb));
    LT(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, n, ldd));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &kWorkspace, sizeof(kWorkspace)));
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, 1, &choice, &found));
    if (found == 0) {
      printf("no cuBLASLt configuration for a product of %lld x %lld x %lld\n",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
      exit(1);
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void Run(cublasLtHandle_t lt, const void* pa, const void* pb, void* pd, void* workspace,
           cudaStream_t s) const {
    const float one = 1, zero = 0;
    LT(cublasLtMatmul(lt, desc, &one, pa, a, pb, b, &zero, pd, d, pd, d, &choice.algo, workspace,
                      kWorkspace, s));
  }
};

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 16384;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, rows %lld, width %lld, vocabulary %lld\n", prop.name, static_cast<long long>(rows),
         static_cast<long long>(kWidth), static_cast<long long>(kVocab));
  __nv_bfloat16 *x, *w, *logits, *dx;
  CK(cudaMalloc(&x, rows * kWidth * 2));
  CK(cudaMalloc(&w, kVocab * kWidth * 2));
  CK(cudaMalloc(&logits, rows * kVocab * 2));
  CK(cudaMalloc(&dx, rows * kWidth * 2));
  void* workspace[2];
  for (void*& p : workspace) CK(cudaMalloc(&p, kWorkspace));
  FillBf16<<<1024, 256>>>(x, rows * kWidth, 1, 1.0f);
  FillBf16<<<1024, 256>>>(w, kVocab * kWidth, 2, 0.05f);
  CK(cudaFuncSetAttribute(SoftmaxRows, cudaFuncAttributeMaxDynamicSharedMemorySize, kVocab * 2));
  CK(cudaDeviceSynchronize());
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));

  for (int chunks : {1, 2, 4, 8}) {
    const int64_t r = rows / chunks;
    // logitsᵀ[V, r] = Wᵀ... column-major: W is [K, V] (ld K), op T; x is [K, r] (ld K).
    const Product forward(lt, true, kVocab, r, kWidth, kWidth, kWidth, kVocab);
    // dxᵀ[K, r] = W[K, V] · dlogitsᵀ[V, r] (column-major, ld K and V).
    const Product data_gradient(lt, false, kWidth, r, kVocab, kWidth, kVocab, kWidth);
    auto fwd = [&](int c, cudaStream_t s) {
      forward.Run(lt, w, x + c * r * kWidth, logits + c * r * kVocab, workspace[0], s);
    };
    auto loss = [&](int c, cudaStream_t s) {
      SoftmaxRows<<<r, 512, kVocab * 2, s>>>(logits + c * r * kVocab);
    };
    auto dgrad = [&](int c, cudaStream_t s) {
      data_gradient.Run(lt, w, logits + c * r * kVocab, dx + c * r * kWidth, workspace[0], s);
    };
    const double t_fwd = MedianMsPerRun(s0, [&] { return fwd(0, s0), true; });
    const double t_loss = MedianMsPerRun(s0, [&] { return loss(0, s0), true; });
    const double t_dgrad = MedianMsPerRun(s0, [&] { return dgrad(0, s0), true; });
    printf("chunks %d (%lld rows each): product %.4f, loss pass %.4f, data gradient %.4f ms\n",
           chunks, static_cast<long long>(r), t_fwd, t_loss, t_dgrad);
    const double sequence = MedianMsPerRun(s0, [&] {
      for (int c = 0; c < chunks; ++c) fwd(c, s0);
      for (int c = 0; c < chunks; ++c) loss(c, s0);
      for (int c = 0; c < chunks; ++c) dgrad(c, s0);
      return true;
    });
    std::vector<cudaEvent_t> made(chunks), lost(chunks);
    for (int c = 0; c < chunks; ++c) {
      CK(cudaEventCreateWithFlags(&made[c], cudaEventDisableTiming));
      CK(cudaEventCreateWithFlags(&lost[c], cudaEventDisableTiming));
    }
    cudaEvent_t joined;
    CK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
    // In a graph, as the step runs it: captured once, replayed.
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    CK(cudaEventRecord(joined, s0));
    CK(cudaStreamWaitEvent(s1, joined));  // s1 joins the capture.
    for (int c = 0; c < chunks; ++c) {
      fwd(c, s0);
      CK(cudaEventRecord(made[c], s0));
      CK(cudaStreamWaitEvent(s1, made[c]));
      loss(c, s1);
      CK(cudaEventRecord(lost[c], s1));
    }
    for (int c = 0; c < chunks; ++c) {
      CK(cudaStreamWaitEvent(s0, lost[c]));
      dgrad(c, s0);
    }
    CK(cudaEventRecord(joined, s1));
    CK(cudaStreamWaitEvent(s0, joined));
    CK(cudaStreamEndCapture(s0, &graph));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const double overlapped = MsPerLaunch(exec, s0);
    printf("  in sequence %.4f ms (pieces summed %.4f); two streams %.4f ms (%+.1f%%)\n", sequence,
           chunks * (t_fwd + t_loss + t_dgrad), overlapped, 100.0 * (overlapped / sequence - 1));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    for (int c = 0; c < chunks; ++c) {
      CK(cudaEventDestroy(made[c]));
      CK(cudaEventDestroy(lost[c]));
    }
    CK(cudaEventDestroy(joined));
  }
  CK(cudaDeviceSynchronize());
  printf("done\n");
  return 0;
}
