// MsPerLaunch(exec, stream): the standalone device diagnostics' (tools/device/*.cu) time of one
// executable graph launched from the host: the median over 7 batches of ms per launch, each batch
// 20 launches back to back after 3 untimed, timed with events.
#ifndef REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_
#define REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda_check.cuh"

inline double MsPerLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> batches;
  for (int r = 0; r < 7; ++r) {
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    batches.push_back(ms / 20);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

#endif  // REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_
