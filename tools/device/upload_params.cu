// Whether an explicit cudaGraphUpload slows later host launches of kernels that take large
// parameters (a trainer's host launches are slower once one of its executables was uploaded,
// docs/benchmarks.md, "The explicit upload is what slows the host's launches"), and what a
// parameter block's size costs a graph node. A chain of `nodes` kernel nodes, each kernel taking a
// struct of kBytes by value; per size: an executable launched plainly, one uploaded first, then
// the plain one again. Not part of the build: on the GPU host, `nvcc -O2 -arch=sm_90 -o
// upload_params tools/device/upload_params.cu && ./upload_params [NODES]`.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "graph_timing.cuh"

template <int kBytes>
struct Block {
  unsigned char bytes[kBytes];
};

// A little work that reads the parameter block, so that it cannot be dropped.
template <int kBytes>
__global__ void Work(Block<kBytes> block, float* sink) {
  float x = threadIdx.x + block.bytes[threadIdx.x % kBytes];
  for (int i = 0; i < 64; ++i) x = x * 0.999f + 1.0f;
  if (x == -1.0f) sink[blockIdx.x] = x;
}

template <int kBytes>
cudaGraph_t Chain(int nodes, float* sink) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  Block<kBytes> block = {};
  void* args[] = {&block, &sink};
  cudaKernelNodeParams k = {};
  k.func = (void*)Work<kBytes>;
  k.gridDim = dim3(132);
  k.blockDim = dim3(128);
  k.kernelParams = args;
  cudaGraphNode_t last = nullptr;
  for (int i = 0; i < nodes; ++i) {
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, last ? &last : nullptr, last ? 1 : 0, &k));
    last = node;
  }
  return g;
}

template <int kBytes>
void Row(int nodes, float* sink, cudaStream_t s) {
  cudaGraph_t g = Chain<kBytes>(nodes, sink);
  cudaGraphExec_t plain, uploaded;
  CK(cudaGraphInstantiateWithFlags(&plain, g, 0));
  const double before = MsPerLaunch(plain, s);
  CK(cudaGraphInstantiateWithFlags(&uploaded, g, 0));
  CK(cudaGraphUpload(uploaded, s));
  CK(cudaStreamSynchronize(s));
  const double up = MsPerLaunch(uploaded, s);
  printf("%5d-byte parameters, %d nodes: plain %.4f ms, uploaded %.4f, plain again %.4f\n", kBytes,
         nodes, before, up, MsPerLaunch(plain, s));
  CK(cudaGraphExecDestroy(uploaded));
  CK(cudaGraphExecDestroy(plain));
  CK(cudaGraphDestroy(g));
}

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? atoi(argv[1]) : 200;
  float* sink;
  CK(cudaMalloc(&sink, 4096));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Row<16>(nodes, sink, s);
  Row<1024>(nodes, sink, s);
  Row<4000>(nodes, sink, s);
  Row<16>(nodes, sink, s);
  return 0;
}
