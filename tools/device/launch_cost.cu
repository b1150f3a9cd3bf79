// Host cost of launching a graph of N nodes (issue 5's Step() time): host launch vs device launch
// (a one-node launcher graph that tail-launches the step), after the device idled 0 or 13 ms, with
// the CPU caches warm or cold (64 MiB of host memory touched). Not part of the build: on the GPU
// host, `nvcc -O2 -arch=sm_90 -rdc=true -o launch_cost tools/device/launch_cost.cu -lcudadevrt`,
// then `./launch_cost auto|spin|yield|block` (the device's scheduling flag).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.cuh"
__global__ void Empty(int* p) {
  if (p && threadIdx.x == 1000) *p = 1;
}
__global__ void Spin(long long cycles) {
  long long s = clock64();
  while (clock64() - s < cycles) {
  }
}
__global__ void Tail(cudaGraphExec_t g) { cudaGraphLaunch(g, cudaStreamGraphTailLaunch); }
double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// A one-block kernel node's parameters.
cudaKernelNodeParams OneBlock(void* func, int threads, void** args) {
  cudaKernelNodeParams k = {};
  k.func = func;
  k.gridDim = dim3(1);
  k.blockDim = dim3(threads);
  k.kernelParams = args;
  return k;
}
cudaGraph_t Chain(int n, int lanes) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  std::vector<cudaGraphNode_t> last(lanes, nullptr);
  int* null = nullptr;
  void* args[] = {&null};
  const cudaKernelNodeParams k = OneBlock((void*)Empty, 32, args);
  for (int i = 0; i < n; ++i) {
    int l = i % lanes;
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, last[l] ? &last[l] : nullptr, last[l] ? 1 : 0, &k));
    last[l] = node;
  }
  return g;
}
int main(int argc, char** argv) {
  const char* sched = argc > 1 ? argv[1] : "auto";
  if (!strcmp(sched, "spin")) CK(cudaSetDeviceFlags(cudaDeviceScheduleSpin));
  if (!strcmp(sched, "yield")) CK(cudaSetDeviceFlags(cudaDeviceScheduleYield));
  if (!strcmp(sched, "block")) CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::vector<char> junk(64 << 20, 1);
  for (int n : {2, 250, 600, 1500}) {
    cudaGraph_t g = Chain(n, 2);
    cudaGraphExec_t host_exec;
    CK(cudaGraphInstantiate(&host_exec, g, 0));
    cudaGraphExec_t dev_exec;
    CK(cudaGraphInstantiate(&dev_exec, g, cudaGraphInstantiateFlagDeviceLaunch));
    CK(cudaGraphUpload(dev_exec, s));
    cudaGraph_t lg;
    CK(cudaGraphCreate(&lg, 0));
    void* args[] = {&dev_exec};
    const cudaKernelNodeParams k = OneBlock((void*)Tail, 1, args);
    cudaGraphNode_t ln;
    CK(cudaGraphAddKernelNode(&ln, lg, nullptr, 0, &k));
    cudaGraphExec_t launcher;
    CK(cudaGraphInstantiate(&launcher, lg, 0));
    for (int kind = 0; kind < 2; ++kind) {
      cudaGraphExec_t e = kind == 0 ? host_exec : launcher;
      for (double wait_ms : {0.0, 13.0}) {
        for (int pollute = 0; pollute < 2; ++pollute) {
          std::vector<double> t;
          for (int i = 0; i < 60; ++i) {
            if (wait_ms > 0) Spin<<<1, 1, 0, s>>>((long long)(wait_ms * 1.7e6));
            CK(cudaGraphLaunch(e, s));
            CK(cudaEventRecord(ev, s));
            CK(cudaEventSynchronize(ev));
            if (pollute) {
              for (size_t j = 0; j < junk.size(); j += 64) junk[j]++;
            }
            double a = now_us();
            CK(cudaGraphLaunch(e, s));
            CK(cudaEventRecord(ev, s));
            double b = now_us();
            t.push_back(b - a);
          }
          CK(cudaStreamSynchronize(s));
          std::sort(t.begin(), t.end());
          printf(
              "sched=%s nodes=%d %s wait=%4.1fms pollute=%d: launch+record median %.2f us p10 %.2f "
              "p90 %.2f\n",
              sched, n, kind ? "device" : "host  ", wait_ms, pollute, t[t.size() / 2],
              t[t.size() / 10], t[t.size() * 9 / 10]);
        }
      }
    }
  }
  return 0;
}
