// Probe for issue 8 (mirroring): a TF32 weight gradient of a 3x3 convolution (pad 1, stride 1 or
// 2, NHWC, square images) that can apply a batch norm + ReLU to its input as it loads it, so that
// a mirrored step need not write the recomputed ReLU output first. Timed beside cuDNN's legacy
// weight gradient (the algorithm cudnnFindConvolutionBackwardFilterAlgorithmEx ranks first, default
// math: TF32) on a = relu(batch_norm_apply(x)) and beside that batch_norm_apply, for ResNet-50's
// 3x3 shapes at batch 64; its result is checked against cuDNN's (relative L2 error).
//
// Design: implicit GEMM on mma.sync m16n8k8 TF32. Block (k tile, c tile, filter row r, split)
// sums 64 k x (3 s x 64 c) over its split's output rows, RS rows per stage: dy rows by cp.async,
// input rows through registers (where the prologue applies), both double-buffered in shared
// memory; the three s taps read one input row at three offsets. Each block writes a partial, and
// a second kernel adds the partials in split order (the same bits every run).
//
// Not part of the build: on the GPU host, `nvcc -O3 -std=c++17 -arch=sm_90
// tools/device/wgrad3x3_probe.cu -lcudnn -o wgrad3x3_probe && ./wgrad3x3_probe` (session 21's
// numbers: docs/benchmarks.md, "Session 21").
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);         \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define DK(x)                                                                          \
  do {                                                                                 \
    cudnnStatus_t e = (x);                                                             \
    if (e != CUDNN_STATUS_SUCCESS) {                                                   \
      printf("cuDNN %s at %s:%d\n", cudnnGetErrorString(e), __FILE__, __LINE__);       \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

constexpr int kTile = 64;      // k (out channels) and c (in channels) per block.
constexpr int kStride = 72;    // smem row stride in floats: conflict-free fragment reads.
constexpr int kThreads = 256;  // 8 warps: 2 along k (32 each) x 4 along (s, c) (48 each).

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_all;\n" ::); }
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ __forceinline__ void Mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// dW[k][r][s][c] partial sums: block (kt, ct, r, split) sums output rows of its split for filter
// row r, all three s, 64 k x 64 c. Rows: (n, p), each W positions. prologue: A = relu(bn(x)).
// Output width Q (input width W = Q * S for stride S, pad 1), RS output rows per stage.
template <int Q, int S>
struct Geometry {
  static constexpr int W = Q * S;
  static constexpr int Wp = (Q + 7) / 8 * 8;        // Output positions padded to the MMA step.
  static constexpr int Ap = (Wp - 1) * S + 3;       // Input columns -1 .. (Wp - 1) * S + 1.
  static constexpr int As = S == 1 ? 72 : 76;       // Conflict-free strides for B fragments.
};

template <int Q, int S, int RS>
constexpr size_t SmemBytes() {
  using G = Geometry<Q, S>;
  return (2 * RS * G::Wp * kStride + 2 * RS * G::Ap * G::As) * sizeof(float);
}

template <int Q, int S, int RS, bool kPrologue>
__global__ void __launch_bounds__(kThreads, 2)
    Wgrad3x3(const float* __restrict__ dy, const float* __restrict__ x,
             const float* __restrict__ mean, const float* __restrict__ gamma,
             const float* __restrict__ invstd, const float* __restrict__ beta,
             float* __restrict__ partial, int n_rows, int C, int K, int rows_per_split) {
  using G = Geometry<Q, S>;
  constexpr int W = G::W, Wp = G::Wp, Ap = G::Ap, As = G::As;
  constexpr int P = Q, H = W;  // Square images: compile-time extents keep the index math cheap.
  extern __shared__ float smem[];
  float* dy_s = smem;                         // [2][RS][Wp][kStride]
  float* a_s = smem + 2 * RS * Wp * kStride;  // [2][RS][Ap][As]
  __shared__ float scale_s[kTile], shift_s[kTile], mean_s[kTile];

  const int k_tiles = K / kTile, c_tiles = C / kTile;
  int b = blockIdx.x;
  const int kt = b % k_tiles;
  b /= k_tiles;
  const int ct = b % c_tiles;
  b /= c_tiles;
  const int r = b % 3;
  const int split = b / 3;
  const int k0 = kt * kTile, c0 = ct * kTile;
  const int row_begin = split * rows_per_split;
  const int row_end = min(n_rows, row_begin + rows_per_split);

  if (threadIdx.x < kTile) {
    const int c = c0 + threadIdx.x;
    mean_s[threadIdx.x] = kPrologue ? mean[c] : 0.0f;
    scale_s[threadIdx.x] = kPrologue ? gamma[c] * invstd[c] : 1.0f;
    shift_s[threadIdx.x] = kPrologue ? beta[c] : 0.0f;
  }
  for (int i = threadIdx.x; i < 2 * RS * (Wp * kStride + Ap * As); i += kThreads) smem[i] = 0.0f;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;
  const int g = lane / 4, t = lane % 4;
  float acc[2][6][4] = {};

  // Whether output row `row` adds anything: inside the split, input row inside the image.
  auto input_row = [&](int row) { return (row % P) * S + r - 1; };
  auto live = [&](int row) {
    const int h = input_row(row);
    return row < row_end && h >= 0 && h < H;
  };
  // dy rows via cp.async (zeros for rows that add nothing): Q positions x 16 chunks of 16 B.
  auto load_dy = [&](int row, int buf) {
    float* dst = dy_s + buf * RS * Wp * kStride;
    for (int i = threadIdx.x; i < RS * Q * 16; i += kThreads) {
      const int rr = i / (Q * 16), q = (i / 16) % Q, j = i % 16;
      float* d = dst + (rr * Wp + q) * kStride + j * 4;
      if (live(row + rr)) {
        CpAsync16(d, dy + (static_cast<long long>(row + rr) * Q + q) * K + k0 + j * 4);
      } else {
        *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    CpAsyncCommit();
  };
  constexpr int kAVecs = (RS * W * 16 + kThreads - 1) / kThreads;
  float4 a_regs[kAVecs];
  auto fetch_a = [&](int row) {
#pragma unroll
    for (int v = 0; v < kAVecs; ++v) {
      const int i = threadIdx.x + v * kThreads;
      const int rr = i / (W * 16), w = (i / 16) % W, j = i % 16;
      if (i < RS * W * 16 && live(row + rr)) {
        const int n = (row + rr) / P, h = input_row(row + rr);
        a_regs[v] = __ldg(reinterpret_cast<const float4*>(
                              x + ((static_cast<long long>(n) * H + h) * W + w) * C + c0) +
                          j);
      } else {
        a_regs[v] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  };
  auto store_a = [&](int row, int buf) {
    float* dst = a_s + buf * RS * Ap * As;
#pragma unroll
    for (int v = 0; v < kAVecs; ++v) {
      const int i = threadIdx.x + v * kThreads;
      if (i < RS * W * 16) {
        const int rr = i / (W * 16), w = (i / 16) % W, j = i % 16;
        float e[4] = {a_regs[v].x, a_regs[v].y, a_regs[v].z, a_regs[v].w};
        if (kPrologue && live(row + rr)) {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int c = j * 4 + u;
            e[u] = fmaxf(fmaf(e[u] - mean_s[c], scale_s[c], shift_s[c]), 0.0f);
          }
        }
        *reinterpret_cast<float4*>(dst + (rr * Ap + w + 1) * As + j * 4) =
            make_float4(e[0], e[1], e[2], e[3]);
      }
    }
  };

  int row = row_begin, buf = 0;
  if (row < row_end) {
    load_dy(row, 0);
    fetch_a(row);
    store_a(row, 0);
    CpAsyncWait();
  }
  __syncthreads();
  while (row < row_end) {
    const int next = row + RS;
    if (next < row_end) {
      load_dy(next, buf ^ 1);
      fetch_a(next);
    }
    const float* dyb = dy_s + buf * RS * Wp * kStride;
    const float* ab = a_s + buf * RS * Ap * As;
#pragma unroll
    for (int rr = 0; rr < RS; ++rr) {
#pragma unroll
      for (int q0 = 0; q0 < Wp; q0 += 8) {
        const float* dq = dyb + (rr * Wp + q0) * kStride;
        const float* aq = ab + (rr * Ap + q0 * S) * As;
        unsigned af[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int m = wm * 32 + mi * 16 + g;
          af[mi][0] = __float_as_uint(dq[t * kStride + m]);
          af[mi][1] = __float_as_uint(dq[t * kStride + m + 8]);
          af[mi][2] = __float_as_uint(dq[(t + 4) * kStride + m]);
          af[mi][3] = __float_as_uint(dq[(t + 4) * kStride + m + 8]);
        }
#pragma unroll
        for (int ni = 0; ni < 6; ++ni) {
          const int n = wn * 48 + ni * 8 + g;  // (s, c) = (n / 64, n % 64)
          const int s = n / 64, c = n % 64;
          unsigned bf[2];
          // Output position q reads input column q * S + s - 1, at index q * S + s.
          bf[0] = __float_as_uint(aq[(t * S + s) * As + c]);
          bf[1] = __float_as_uint(aq[((t + 4) * S + s) * As + c]);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) Mma(acc[mi][ni], af[mi], bf);
        }
      }
    }
    if (next < row_end) store_a(next, buf ^ 1);
    CpAsyncWait();
    __syncthreads();
    buf ^= 1;
    row = next;
  }
  float* out = partial + static_cast<long long>(blockIdx.x) * kTile * 192;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 6; ++ni) {
      const int m = wm * 32 + mi * 16 + g, n = wn * 48 + ni * 8 + 2 * t;
      out[m * 192 + n] = acc[mi][ni][0];
      out[m * 192 + n + 1] = acc[mi][ni][1];
      out[(m + 8) * 192 + n] = acc[mi][ni][2];
      out[(m + 8) * 192 + n + 1] = acc[mi][ni][3];
    }
  }
}

// dW[k][r][s][c] = sum over splits, in order.
__global__ void ReducePartials(const float* __restrict__ partial, float* __restrict__ dw, int C,
                               int K, int splits) {
  const int total = K * 9 * C;
  const int k_tiles = K / kTile, c_tiles = C / kTile, tiles = k_tiles * c_tiles * 3;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = i % C, s = (i / C) % 3, r = (i / (3 * C)) % 3, k = i / (9 * C);
    const int tile = (k / kTile) + k_tiles * ((c / kTile) + c_tiles * r);
    const int off = (k % kTile) * 192 + s * 64 + c % kTile;
    float sum = 0.0f;
    for (int sp = 0; sp < splits; ++sp) sum += partial[(static_cast<long long>(sp) * tiles + tile) * kTile * 192 + off];
    dw[i] = sum;
  }
}

__global__ void BnRelu(const float* x, const float* mean, const float* gamma, const float* invstd,
                       const float* beta, float* a, long long n, int C) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const int c = i % C;
    a[i] = fmaxf(fmaf(x[i] - mean[c], gamma[c] * invstd[c], beta[c]), 0.0f);
  }
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <int Q, int S, int RS>
void RunShape(int N, int C, int waves, cudnnHandle_t handle) {
  constexpr int W = Q * S;
  const int H = W, P = Q, K = C;
  const long long x_elems = 1LL * N * H * W * C, dy_elems = 1LL * N * P * Q * K;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> hx(x_elems), hdy(dy_elems), hm(C), hg(C), hi(C), hb(C);
  for (auto& v : hx) v = u(rng);
  for (auto& v : hdy) v = u(rng);
  for (int c = 0; c < C; ++c) {
    hm[c] = 0.1f * u(rng);
    hg[c] = 1.0f + 0.5f * u(rng);
    hi[c] = 1.0f + 0.3f * u(rng);
    hb[c] = 0.2f * u(rng);
  }
  float *x, *dy, *a, *m, *ga, *iv, *be, *dw_ref, *dw, *partial;
  CK(cudaMalloc(&x, x_elems * 4));
  CK(cudaMalloc(&a, x_elems * 4));
  CK(cudaMalloc(&dy, dy_elems * 4));
  for (float** p : {&m, &ga, &iv, &be}) CK(cudaMalloc(p, C * 4));
  CK(cudaMalloc(&dw_ref, 9LL * K * C * 4));
  CK(cudaMalloc(&dw, 9LL * K * C * 4));
  CK(cudaMemcpy(x, hx.data(), x_elems * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dy, hdy.data(), dy_elems * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(m, hm.data(), C * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ga, hg.data(), C * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(iv, hi.data(), C * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(be, hb.data(), C * 4, cudaMemcpyHostToDevice));
  BnRelu<<<1024, 256>>>(x, m, ga, iv, be, a, x_elems, C);

  // cuDNN on a.
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  DK(cudnnCreateTensorDescriptor(&xd));
  DK(cudnnCreateTensorDescriptor(&yd));
  DK(cudnnCreateFilterDescriptor(&wd));
  DK(cudnnCreateConvolutionDescriptor(&cd));
  DK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, C, H, W));
  DK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, K, P, Q));
  DK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, K, C, 3, 3));
  DK(cudnnSetConvolution2dDescriptor(cd, 1, 1, S, S, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  DK(cudnnSetConvolutionMathType(cd, CUDNN_DEFAULT_MATH));
  size_t ws_bytes = 256 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  cudnnConvolutionBwdFilterAlgoPerf_t perf[8];
  int found = 0;
  DK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xd, a, yd, dy, cd, wd, dw_ref, 8, &found,
                                                   perf, ws, ws_bytes));
  const cudnnConvolutionBwdFilterAlgo_t algo = perf[0].algo;
  const float one = 1.0f, zero = 0.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time = [&](auto&& launch) {
    for (int i = 0; i < 10; ++i) launch();
    std::vector<float> ms;
    for (int i = 0; i < 50; ++i) {
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    return Median(ms);
  };
  const float cudnn_ms = time([&] {
    DK(cudnnConvolutionBackwardFilter(handle, &one, xd, a, yd, dy, cd, algo, ws, ws_bytes, &zero,
                                      wd, dw_ref));
  });
  const float apply_ms = time([&] { BnRelu<<<1056, 256>>>(x, m, ga, iv, be, a, x_elems, C); });

  const int n_rows = N * P;
  const int tiles = (K / kTile) * (C / kTile) * 3;
  int splits = std::max(1, std::min(n_rows / RS, (132 * 2 * waves + tiles - 1) / tiles));
  const int rows_per_split = ((n_rows + splits - 1) / splits + RS - 1) / RS * RS;
  splits = (n_rows + rows_per_split - 1) / rows_per_split;
  CK(cudaMalloc(&partial, 1LL * splits * tiles * kTile * 192 * 4));
  constexpr size_t smem = SmemBytes<Q, S, RS>();
  CK(cudaFuncSetAttribute(Wgrad3x3<Q, S, RS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem));
  CK(cudaFuncSetAttribute(Wgrad3x3<Q, S, RS, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem));
  auto ours = [&](bool prologue) {
    if (prologue) {
      Wgrad3x3<Q, S, RS, true><<<splits * tiles, kThreads, smem>>>(
          dy, x, m, ga, iv, be, partial, n_rows, C, K, rows_per_split);
    } else {
      Wgrad3x3<Q, S, RS, false><<<splits * tiles, kThreads, smem>>>(
          dy, a, m, ga, iv, be, partial, n_rows, C, K, rows_per_split);
    }
    ReducePartials<<<264, 256>>>(partial, dw, C, K, splits);
  };
  const float ours_plain = time([&] { ours(false); });
  const float ours_pro = time([&] { ours(true); });
  CK(cudaGetLastError());
  // Compare with cuDNN (both TF32): relative L2 error.
  std::vector<float> got(9LL * K * C), want(9LL * K * C);
  for (bool prologue : {false, true}) {
    ours(prologue);
    CK(cudaMemcpy(got.data(), dw, got.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(want.data(), dw_ref, want.size() * 4, cudaMemcpyDeviceToHost));
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want[i]) * (double)(got[i] - want[i]);
      norm += want[i] * (double)want[i];
    }
    printf("  %s rel err vs cudnn %.2e\n", prologue ? "prologue" : "plain", std::sqrt(err / norm));
  }
  const double flops = 2.0 * n_rows * Q * K * 9.0 * C;
  printf("N=%d H=W=%d stride %d RS %d waves %d C=K=%d: cudnn algo %d %.4f ms (%.0f TFLOPS); bn_relu %.4f ms; ours plain %.4f "
         "ms, prologue %.4f ms (%.0f TFLOPS), splits %d blocks %d smem %zu\n",
         N, W, S, RS, waves, C, (int)algo, cudnn_ms, flops / cudnn_ms / 1e9, apply_ms, ours_plain, ours_pro,
         flops / ours_pro / 1e9, splits, splits * tiles, smem);
  for (void* p : {(void*)x, (void*)a, (void*)dy, (void*)m, (void*)ga, (void*)iv, (void*)be,
                  (void*)dw_ref, (void*)dw, (void*)partial, ws})
    CK(cudaFree(p));
}

int main() {
  cudnnHandle_t handle;
  DK(cudnnCreate(&handle));
  for (int waves : {1, 2}) {
    RunShape<56, 1, 1>(64, 64, waves, handle);
    RunShape<28, 1, 2>(64, 128, waves, handle);
    RunShape<14, 1, 4>(64, 256, waves, handle);
    RunShape<7, 1, 8>(64, 512, waves, handle);
    RunShape<28, 2, 1>(64, 128, waves, handle);  // layer2.0's conv2: 56x56 in, stride 2.
    RunShape<14, 2, 2>(64, 256, waves, handle);  // layer3.0's.
    RunShape<7, 2, 4>(64, 512, waves, handle);   // layer4.0's.
  }
  return 0;
}
