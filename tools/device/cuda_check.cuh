// CK(call): the standalone device diagnostics' (tools/device/*.cu) check of a CUDA runtime call:
// print where and why it failed, and exit.
#ifndef REPRISE_TOOLS_DEVICE_CUDA_CHECK_CUH_
#define REPRISE_TOOLS_DEVICE_CUDA_CHECK_CUH_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t err_ = (x);                                               \
    if (err_ != cudaSuccess) {                                            \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

#endif  // REPRISE_TOOLS_DEVICE_CUDA_CHECK_CUH_
