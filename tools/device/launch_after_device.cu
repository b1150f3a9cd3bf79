// Whether launching a step graph from the device slows the host's later launches of the same graph
// (kAuto's launch trial: a trainer set up for both launches runs its host launches 2 to 5% slower
// than one that only launches from the host, capture/launch_trial.h). One graph of small kernels
// on two lanes, instantiated for the host; its GPU time per step (events around batches of
// back-to-back launches, median of 7 batches) before any device launch, then on the stream that
// carried device launches and on fresh streams, with the device's executable alive and after it
// is destroyed, and for an executable instantiated afterwards. Not part of the build: on the GPU
// host, `nvcc -O2 -arch=sm_90 -rdc=true -o launch_after_device tools/device/launch_after_device.cu
// -lcudadevrt`, then `./launch_after_device [NODES] [SPIN_CYCLES]`.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "graph_timing.cuh"

// A few microseconds of work on every block, so that the lanes' kernels share the GPU.
__global__ void Work(long long cycles, float* sink) {
  const long long start = clock64();
  float x = threadIdx.x;
  while (clock64() - start < cycles) x = x * 0.999f + 1.0f;
  if (x == -1.0f) sink[blockIdx.x] = x;
}
__global__ void Tail(cudaGraphExec_t g) { cudaGraphLaunch(g, cudaStreamGraphTailLaunch); }

// `nodes` kernels on two lanes, lane 1 joining lane 0 every 8 nodes (a trainer's fork and join).
cudaGraph_t TwoLanes(int nodes, long long cycles, float* sink) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaKernelNodeParams k = {};
  void* args[] = {&cycles, &sink};
  k.func = (void*)Work;
  k.gridDim = dim3(66);
  k.blockDim = dim3(128);
  k.kernelParams = args;
  cudaGraphNode_t last[2] = {nullptr, nullptr};
  for (int i = 0; i < nodes; ++i) {
    const int lane = (i % 3 == 2) ? 1 : 0;
    std::vector<cudaGraphNode_t> deps;
    if (last[lane]) deps.push_back(last[lane]);
    if (lane == 0 && i % 8 == 0 && last[1]) deps.push_back(last[1]);
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, deps.data(), deps.size(), &k));
    last[lane] = node;
  }
  return g;
}

cudaStream_t HighestPriorityStream() {
  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s;
  CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return s;
}

cudaGraphExec_t ForHost(cudaGraph_t g) {
  cudaGraphExec_t e;
  CK(cudaGraphInstantiateWithFlags(&e, g, cudaGraphInstantiateFlagUseNodePriority));
  return e;
}

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? atoi(argv[1]) : 550;
  const long long cycles = argc > 2 ? atoll(argv[2]) : 8000;
  float* sink;
  CK(cudaMalloc(&sink, 4096));
  cudaGraph_t g = TwoLanes(nodes, cycles, sink);
  cudaStream_t s1 = HighestPriorityStream(), s0 = HighestPriorityStream();
  cudaGraphExec_t host = ForHost(g);
  auto row = [&](const char* what, cudaGraphExec_t e, cudaStream_t s) {
    printf("%-62s %.4f ms a step\n", what, MsPerLaunch(e, s));
  };
  row("host exec, stream 1, before any device launch", host, s1);
  row("host exec, stream 0, before any device launch", host, s0);
  row("host exec, stream 1, again", host, s1);
  // kAuto's trial uploads its host executable with cudaGraphUpload before its first launch; a
  // kHost trainer's executable is uploaded by its first launch.
  cudaGraphExec_t uploaded = ForHost(g);
  CK(cudaGraphUpload(uploaded, s1));
  row("host exec uploaded explicitly (cudaGraphUpload), stream 1", uploaded, s1);
  row("host exec uploaded explicitly, stream 0", uploaded, s0);
  row("host exec, stream 1, beside the uploaded one", host, s1);

  cudaGraphExec_t device;
  cudaGraphInstantiateParams params = {};
  params.flags = cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  CK(cudaGraphInstantiateWithParams(&device, g, &params));
  CK(cudaGraphUpload(device, s1));
  cudaGraph_t lg;
  CK(cudaGraphCreate(&lg, 0));
  cudaKernelNodeParams k = {};
  void* args[] = {&device};
  k.func = (void*)Tail;
  k.gridDim = dim3(1);
  k.blockDim = dim3(1);
  k.kernelParams = args;
  cudaGraphNode_t ln;
  CK(cudaGraphAddKernelNode(&ln, lg, nullptr, 0, &k));
  cudaGraphExec_t launcher = ForHost(lg);
  CK(cudaGraphUpload(launcher, s1));
  row("host exec, stream 1, device exec instantiated, not launched", host, s1);
  row("launcher (device launch), stream 1", launcher, s1);
  row("host exec, stream 1, after device launches on it", host, s1);
  row("host exec, stream 0 (no device launch on it)", host, s0);
  cudaStream_t s2 = HighestPriorityStream();
  row("host exec, a stream made after the device launches", host, s2);
  row("host exec, stream 1, alternating with device launches (1/4)", host, s1);
  for (int i = 0; i < 20; ++i) {
    CK(cudaGraphLaunch(launcher, s1));
    CK(cudaGraphLaunch(host, s1));
  }
  CK(cudaStreamSynchronize(s1));
  row("host exec, stream 1, after interleaved launches", host, s1);

  CK(cudaGraphExecDestroy(launcher));
  CK(cudaGraphExecDestroy(device));
  CK(cudaDeviceSynchronize());
  row("host exec, stream 1, device exec destroyed", host, s1);
  row("host exec, stream 0, device exec destroyed", host, s0);
  cudaGraphExec_t later = ForHost(g);
  row("new host exec, stream 1", later, s1);
  row("new host exec, stream 0", later, s0);
  cudaGraph_t clone;
  CK(cudaGraphClone(&clone, g));
  cudaGraphExec_t cloned = ForHost(clone);
  row("host exec of a clone, stream 1", cloned, s1);
  cudaGraphExec_t uploaded_later = ForHost(g);
  CK(cudaGraphUpload(uploaded_later, s1));
  row("new host exec uploaded explicitly, stream 1", uploaded_later, s1);
  row("first uploaded host exec, stream 1, last", uploaded, s1);
  row("first host exec, stream 1, last", host, s1);
  return 0;
}
