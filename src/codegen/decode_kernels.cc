#include "src/codegen/decode_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

GeneratedKernel Make(const char* base, DType dtype, const std::string& signature,
                     const std::string& body) {
  const std::string name = ElementKernelName(base, dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "#define BLOCK ", kDecodeAttentionBlock,
                             "\nextern \"C\" __global__ void ", name, "(", signature, ") {\n", body,
                             "}\n")};
}

}  // namespace

GeneratedKernel DecodeAttention(DType dtype) {
  return Make("reprise_decode_attention", dtype,
              "const elem_t* __restrict__ qkv, elem_t* __restrict__ k_cache, "
              "elem_t* __restrict__ v_cache, const int* __restrict__ position, "
              "elem_t* __restrict__ y, int heads, int head_dim, int max_positions, float scale",
              R"(
  extern __shared__ float shared[];  // [head_dim] the query, then [max_positions] scores.
  float* q = shared;
  float* score = shared + head_dim;
  __shared__ float partial[BLOCK / 32];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int width = heads * head_dim;
  const int p = position[0];
  elem_t* out = y + (long long)b * width + h * head_dim;
  if (p < 0 || p >= max_positions) {
    for (int d = tid; d < head_dim; d += BLOCK) out[d] = FromFloat(__int_as_float(0x7fc00000));
    return;
  }
  const elem_t* row = qkv + (long long)b * 3 * width + h * head_dim;
  const long long cache_row = (long long)b * max_positions * width + h * head_dim;
  elem_t* k_rows = k_cache + cache_row;
  elem_t* v_rows = v_cache + cache_row;
  // This token's key and value: row p of this head's slice of the caches. Each block writes and
  // then reads only its own (sequence, head) slice, so a block barrier orders the two.
  for (int d = tid; d < head_dim; d += BLOCK) {
    k_rows[(long long)p * width + d] = row[width + d];
    v_rows[(long long)p * width + d] = row[2 * width + d];
    q[d] = ToFloat(row[d]);
  }
  __syncthreads();
  // One score per cached position, each a dot product in d order.
  float local_max = __int_as_float(0xff800000);  // -infinity (NVRTC has no math.h)
  for (int t = tid; t <= p; t += BLOCK) {
    const elem_t* key = k_rows + (long long)t * width;
    float s = 0.0f;
    for (int d = 0; d < head_dim; ++d) s = fmaf(q[d], ToFloat(key[d]), s);
    s *= scale;
    score[t] = s;
    local_max = fmaxf(local_max, s);
  }
  // Block max, then block sum of exp(s - max): warp shuffles, then the warps' partials in order.
  for (int o = 16; o > 0; o >>= 1) {
    local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
  }
  if (tid % 32 == 0) partial[tid / 32] = local_max;
  __syncthreads();
  float max_score = partial[0];
  for (int w = 1; w < BLOCK / 32; ++w) max_score = fmaxf(max_score, partial[w]);
  __syncthreads();
  float local_sum = 0.0f;
  for (int t = tid; t <= p; t += BLOCK) {
    const float e = expf(score[t] - max_score);
    score[t] = e;
    local_sum += e;
  }
  for (int o = 16; o > 0; o >>= 1) local_sum += __shfl_xor_sync(0xffffffffu, local_sum, o);
  if (tid % 32 == 0) partial[tid / 32] = local_sum;
  __syncthreads();
  float sum = 0.0f;
  for (int w = 0; w < BLOCK / 32; ++w) sum += partial[w];
  const float inv = 1.0f / sum;
  // y = Σ_t p_t v_t, one output element per thread, t in order.
  for (int d = tid; d < head_dim; d += BLOCK) {
    float acc = 0.0f;
    for (int t = 0; t <= p; ++t) {
      acc = fmaf(score[t], ToFloat(v_rows[(long long)t * width + d]), acc);
    }
    out[d] = FromFloat(acc * inv);
  }
)");
}

GeneratedKernel AddPositionAt(DType dtype) {
  return Make("reprise_add_position_at", dtype,
              "const elem_t* __restrict__ x, const elem_t* __restrict__ table, "
              "const int* __restrict__ position, elem_t* __restrict__ y, long long rows, int cols, "
              "int table_rows",
              R"(
  const int p = position[0];
  const bool valid = p >= 0 && p < table_rows;
  const long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    y[i] = valid ? FromFloat(ToFloat(x[i]) + ToFloat(table[(long long)p * cols + i % cols]))
                 : FromFloat(__int_as_float(0x7fc00000));
  }
)");
}

GeneratedKernel AdvancePosition() {
  return {"reprise_advance_position", R"(
extern "C" __global__ void reprise_advance_position(int* position, int* next) {
  position[0] += 1;
  next[0] = position[0];
}
)"};
}

std::vector<GeneratedKernel> DecodeKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    kernels.push_back(DecodeAttention(dtype));
    kernels.push_back(AddPositionAt(dtype));
  }
  kernels.push_back(AdvancePosition());
  return kernels;
}

}  // namespace reprise::codegen
