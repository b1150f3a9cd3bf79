// The gather-copy kernel (gather_list.h). Compiled by nvcc apart from the library's C++ (see
// CMakeLists.txt), so it includes nothing of Abseil.
#include <algorithm>

#include "src/runtime/gather_list.h"

namespace reprise::runtime {
namespace {

constexpr int kThreads = 256;

// Blocks for a range of this many bytes: one 16-byte copy per thread, at most two waves of an
// H100's SMs (the copies are small: scalars and device-resident batches).
int BlocksFor(uint64_t bytes) {
  const uint64_t per_block = uint64_t{kThreads} * 16;
  return static_cast<int>(std::clamp<uint64_t>((bytes + per_block - 1) / per_block, 1, 264));
}

}  // namespace

// Named kGatherKernelName.
extern "C" __global__ void reprise_gather_copy(GatherList list) {
  const uint64_t thread = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (int r = 0; r < list.count; ++r) {
    const GatherRange range = list.ranges[r];
    char* const dst = static_cast<char*>(range.destination);
    const char* const src = static_cast<const char*>(range.source);
    uint64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
      const uint64_t quads = range.bytes / 16;
      for (uint64_t i = thread; i < quads; i += stride) {
        reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
      }
      done = quads * 16;
    }
    for (uint64_t i = done + thread; i < range.bytes; i += stride) dst[i] = src[i];
  }
}

cudaKernelNodeParams GatherKernelParams(const GatherList& list, void** args) {
  uint64_t largest = 0;
  for (int r = 0; r < list.count; ++r) largest = std::max(largest, list.ranges[r].bytes);
  cudaKernelNodeParams params = {};
  params.func = reinterpret_cast<void*>(&reprise_gather_copy);
  params.gridDim = dim3(BlocksFor(largest));
  params.blockDim = dim3(kThreads);
  params.kernelParams = args;
  return params;
}

cudaError_t LaunchGatherKernel(const GatherList& list, cudaStream_t stream) {
  void* args[1] = {const_cast<GatherList*>(&list)};
  const cudaKernelNodeParams p = GatherKernelParams(list, args);
  const cudaError_t launched =
      cudaLaunchKernel(p.func, p.gridDim, p.blockDim, p.kernelParams, p.sharedMemBytes, stream);
  return launched != cudaSuccess ? launched : cudaGetLastError();
}

}  // namespace reprise::runtime
