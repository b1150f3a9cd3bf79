// The standalone device diagnostics' (tools/device/*.cu) timing: MedianMsPerRun(stream, run), the
// median over 7 batches of ms per run of `run()` (which enqueues on `stream` and returns whether it
// could), each batch 20 runs back to back after 3 untimed, timed with events; -1 when an untimed
// run fails. MsPerLaunch(exec, stream): the same for one executable graph launched from the host.
#ifndef REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_
#define REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda_check.cuh"

template <typename Run>
double MedianMsPerRun(cudaStream_t s, Run&& run) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> batches;
  for (int r = 0; r < 7; ++r) {
    bool ran = true;
    for (int i = 0; i < 3 && ran; ++i) ran = run();
    if (!ran) {
      CK(cudaEventDestroy(a));
      CK(cudaEventDestroy(b));
      return -1;
    }
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < 20; ++i) run();
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

inline double MsPerLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  return MedianMsPerRun(s, [&] {
    CK(cudaGraphLaunch(exec, s));
    return true;
  });
}

#endif  // REPRISE_TOOLS_DEVICE_GRAPH_TIMING_CUH_
