#include "src/codegen/attention_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

// Shared by the three kernels: addressing and block-wide reductions in a fixed order (warp
// shuffles, then the first warp over the warps' results), so that the sums do not depend on
// timing.
constexpr char kHelpers[] = R"(
__device__ __forceinline__ long long RowIndex(int b, int t, int h, int seq, int head_dim,
                                              long long row) {
  return ((long long)b * seq + t) * row + (long long)h * head_dim;
}
__device__ __forceinline__ float Dot(const float* a, const elem_t* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; ++d) s = fmaf(a[d], ToFloat(b[d]), s);
  return s;
}
// All threads of the block call it; every thread gets the result.
__device__ float BlockReduce(float value, bool is_max, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous reduction.
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < warps; ++w) total = is_max ? fmaxf(total, scratch[w]) : total + scratch[w];
  return total;
}
)";

std::string Source(DType dtype, const std::string& name, const std::string& signature,
                   const std::string& body) {
  return absl::StrCat(ElementTypeSource(dtype), kHelpers, "extern \"C\" __global__ void ", name,
                      "(", signature, ") {\n", body, "}\n");
}

}  // namespace

GeneratedKernel AttentionForward(DType dtype) {
  const std::string name = ElementKernelName("reprise_attention_fwd", dtype);
  return {name, Source(dtype, name, R"(
    const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
    elem_t* __restrict__ o, float* __restrict__ stats, int seq, int heads, int head_dim,
    long long row, float scale)",
                       R"(
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  float* qs = smem;            // [head_dim]
  float* p = smem + head_dim;  // [seq]: scores, then exp(score - max)
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const elem_t* qi = q + RowIndex(b, i, h, seq, head_dim, row);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) qs[d] = ToFloat(qi[d]);
  __syncthreads();
  float local_max = __int_as_float(0xff800000);  // -infinity (NVRTC has no math.h)
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float s = scale * Dot(qs, k + RowIndex(b, j, h, seq, head_dim, row), head_dim);
    p[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = BlockReduce(local_max, true, scratch);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = expf(p[j] - m);
    p[j] = e;
    local_sum += e;
  }
  const float sum = BlockReduce(local_sum, false, scratch);  // Its barriers publish p.
  const float inv = 1.0f / sum;
  const long long width = (long long)heads * head_dim;
  elem_t* oi = o + RowIndex(b, i, h, seq, head_dim, width);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) {
      acc = fmaf(p[j], ToFloat(v[RowIndex(b, j, h, seq, head_dim, row) + d]), acc);
    }
    oi[d] = FromFloat(acc * inv);
  }
  if (threadIdx.x == 0) stats[((long long)b * heads + h) * seq + i] = m + logf(sum);
)")};
}

GeneratedKernel AttentionBackwardDq(DType dtype) {
  const std::string name = ElementKernelName("reprise_attention_bwd_dq", dtype);
  return {name, Source(dtype, name, R"(
    const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
    const elem_t* __restrict__ o, const elem_t* __restrict__ d_o,
    const float* __restrict__ stats, elem_t* __restrict__ dq, int seq, int heads, int head_dim,
    long long row, float scale)",
                       R"(
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  float* qs = smem;                 // [head_dim]
  float* dos = smem + head_dim;     // [head_dim]
  float* ds = smem + 2 * head_dim;  // [seq]: dS of this query's row
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const long long width = (long long)heads * head_dim;
  const long long qi = RowIndex(b, i, h, seq, head_dim, row);
  const long long oi = RowIndex(b, i, h, seq, head_dim, width);
  float local = 0.0f;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    qs[d] = ToFloat(q[qi + d]);
    dos[d] = ToFloat(d_o[oi + d]);
    local = fmaf(dos[d], ToFloat(o[oi + d]), local);
  }
  const float delta = BlockReduce(local, false, scratch);  // dO_i · O_i; publishes qs and dos.
  const float lse = stats[((long long)b * heads + h) * seq + i];
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const long long kj = RowIndex(b, j, h, seq, head_dim, row);
    const float p = expf(scale * Dot(qs, k + kj, head_dim) - lse);
    ds[j] = p * (Dot(dos, v + kj, head_dim) - delta);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) {
      acc = fmaf(ds[j], ToFloat(k[RowIndex(b, j, h, seq, head_dim, row) + d]), acc);
    }
    dq[qi + d] = FromFloat(scale * acc);
  }
)")};
}

GeneratedKernel AttentionBackwardDkv(DType dtype) {
  const std::string name = ElementKernelName("reprise_attention_bwd_dkv", dtype);
  return {name, Source(dtype, name, R"(
    const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
    const elem_t* __restrict__ o, const elem_t* __restrict__ d_o,
    const float* __restrict__ stats, elem_t* __restrict__ dk, elem_t* __restrict__ dv, int seq,
    int heads, int head_dim, long long row, float scale)",
                       R"(
  extern __shared__ float smem[];
  float* ks = smem;                        // [head_dim]
  float* vs = smem + head_dim;             // [head_dim]
  float* p = smem + 2 * head_dim;          // [seq - j]: P[i, j] for queries i >= j
  float* ds = smem + 2 * head_dim + seq;   // [seq - j]: dS[i, j]
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const long long width = (long long)heads * head_dim;
  const long long kj = RowIndex(b, j, h, seq, head_dim, row);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    ks[d] = ToFloat(k[kj + d]);
    vs[d] = ToFloat(v[kj + d]);
  }
  __syncthreads();
  for (int i = j + threadIdx.x; i < seq; i += blockDim.x) {
    const long long qi = RowIndex(b, i, h, seq, head_dim, row);
    const long long oi = RowIndex(b, i, h, seq, head_dim, width);
    float s = 0.0f, dp = 0.0f, delta = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
      const float dod = ToFloat(d_o[oi + d]);
      s = fmaf(ToFloat(q[qi + d]), ks[d], s);
      dp = fmaf(dod, vs[d], dp);
      delta = fmaf(dod, ToFloat(o[oi + d]), delta);
    }
    const float pij = expf(scale * s - stats[((long long)b * heads + h) * seq + i]);
    p[i - j] = pij;
    ds[i - j] = pij * (dp - delta);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc_v = 0.0f, acc_k = 0.0f;
    for (int i = j; i < seq; ++i) {
      const long long qi = RowIndex(b, i, h, seq, head_dim, row);
      acc_v = fmaf(p[i - j], ToFloat(d_o[RowIndex(b, i, h, seq, head_dim, width) + d]), acc_v);
      acc_k = fmaf(ds[i - j], ToFloat(q[qi + d]), acc_k);
    }
    dv[kj + d] = FromFloat(acc_v);
    dk[kj + d] = FromFloat(scale * acc_k);
  }
)")};
}

std::vector<GeneratedKernel> AttentionKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    kernels.push_back(AttentionForward(dtype));
    kernels.push_back(AttentionBackwardDq(dtype));
    kernels.push_back(AttentionBackwardDkv(dtype));
  }
  return kernels;
}

}  // namespace reprise::codegen
