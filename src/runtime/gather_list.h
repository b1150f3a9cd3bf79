// The argument of the gather-copy kernel (gather_copy.h), free of Abseil so that nvcc compiles
// the kernel's file in its own dialect.
#ifndef REPRISE_SRC_RUNTIME_GATHER_LIST_H_
#define REPRISE_SRC_RUNTIME_GATHER_LIST_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace reprise::runtime {

struct GatherRange {
  void* destination = nullptr;
  const void* source = nullptr;  // A device address (device memory or mapped pinned host).
  uint64_t bytes = 0;
};

// The kernel's one argument, by value: no device copy of the list to keep up to date, and a
// captured launch is re-pointed by updating its parameters.
struct GatherList {
  static constexpr int kMaxRanges = 8;
  GatherRange ranges[kMaxRanges];
  int count = 0;
};

// The kernel's name in a captured graph (extern "C": unmangled).
inline constexpr char kGatherKernelName[] = "reprise_gather_copy";

// The kernel's launch for `list` (function, grid, block), its parameters `args`, whose one entry
// the caller points at `list`: what a launch uses, and what a captured node is updated to.
cudaKernelNodeParams GatherKernelParams(const GatherList& list, void** args);

// Enqueues the kernel that copies every range of `list` on `stream`; cudaGetLastError's result.
cudaError_t LaunchGatherKernel(const GatherList& list, cudaStream_t stream);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_GATHER_LIST_H_
