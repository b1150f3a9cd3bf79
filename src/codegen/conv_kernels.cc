#include "src/codegen/conv_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {

GeneratedKernel ChannelBiasAdd(DType dtype) {
  // 64-bit division is slow on the GPU; tensors under 2^32 elements (all but the largest) take the
  // 32-bit path, chosen once for the whole grid.
  const std::string name = ElementKernelName("reprise_channel_bias_add", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "extern \"C\" __global__ void ", name, R"((
    const elem_t* __restrict__ x, const elem_t* __restrict__ b, elem_t* __restrict__ y,
    long long n, long long channels, long long inner) {
  const long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long step = (long long)gridDim.x * blockDim.x;
  if (n <= 0xffffffffLL) {
    const unsigned c32 = (unsigned)channels, inner32 = (unsigned)inner;
    for (long long i = start; i < n; i += step) {
      y[i] = FromFloat(ToFloat(x[i]) + ToFloat(b[((unsigned)i / inner32) % c32]));
    }
  } else {
    for (long long i = start; i < n; i += step) {
      y[i] = FromFloat(ToFloat(x[i]) + ToFloat(b[(i / inner) % channels]));
    }
  }
}
)")};
}

GeneratedKernel ChannelSum(DType dtype) {
  // Threads walk the channel's (o, j) elements in flat order, so neighbours read neighbouring
  // addresses within each H·W plane.
  const std::string name = ElementKernelName("reprise_channel_sum", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "#define BLOCK ", kChannelSumBlock,
                             "\nextern \"C\" __global__ void ", name, R"((
    const elem_t* __restrict__ dy, elem_t* __restrict__ db, long long outer, long long channels,
    long long inner) {
  __shared__ float partial[BLOCK];
  const long long c = blockIdx.x;
  const long long count = outer * inner;
  float sum = 0.0f;
  if (count <= 0x7fffffffLL) {  // 32-bit division where it suffices (e + BLOCK cannot wrap).
    const unsigned count32 = (unsigned)count, inner32 = (unsigned)inner;
    for (unsigned e = threadIdx.x; e < count32; e += BLOCK) {
      const unsigned o = e / inner32, j = e - o * inner32;
      sum += ToFloat(dy[((long long)o * channels + c) * inner + j]);
    }
  } else {
    for (long long e = threadIdx.x; e < count; e += BLOCK) {
      const long long o = e / inner, j = e - o * inner;
      sum += ToFloat(dy[(o * channels + c) * inner + j]);
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = BLOCK / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = FromFloat(partial[0]);
}
)")};
}

std::vector<GeneratedKernel> ConvKernels() {
  std::vector<GeneratedKernel> kernels;
  for (DType dtype : kKernelElementTypes) {
    kernels.push_back(ChannelBiasAdd(dtype));
    kernels.push_back(ChannelSum(dtype));
  }
  return kernels;
}

}  // namespace reprise::codegen
