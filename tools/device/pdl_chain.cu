// What programmatic dependent launch (PDL) saves between dependent kernels of a captured graph:
// a chain of small memory-bound kernels (each adds one to a buffer the previous one wrote),
// captured from one stream or from two lanes joined every 8 kernels, launched plain or with the
// programmatic-serialization attribute, the kernels waiting (griddepcontrol.wait) before any load
// and triggering their dependents (griddepcontrol.launch_dependents) after the wait, at the end, or
// not at all. Prints the median GPU time per kernel over many replays, and checks every element of
// the result (a kernel that read before its producer finished would leave a wrong count). Not part
// of the build: `nvcc -O2 -arch=sm_90 -o pdl_chain tools/device/pdl_chain.cu`, then
// `./pdl_chain [KERNELS]`.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

enum Form { kPlain = 0, kWaitOnly = 1, kTriggerEarly = 2, kTriggerLate = 3 };
const char* kFormNames[] = {"plain", "pdl wait, implicit trigger", "pdl trigger after wait",
                            "pdl trigger after stores"};

__global__ void AddOne(const float4* in, float4* out, int n4, int form) {
  if (form != kPlain) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (form == kTriggerEarly) asm volatile("griddepcontrol.launch_dependents;");
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    float4 v = in[i];
    out[i] = make_float4(v.x + 1.0f, v.y + 1.0f, v.z + 1.0f, v.w + 1.0f);
  }
  if (form == kTriggerLate) asm volatile("griddepcontrol.launch_dependents;");
}

void Launch(cudaStream_t s, int form, int blocks, const float4* in, float4* out, int n4) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(256);
  config.stream = s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = form == kPlain ? 0 : 1;
  cudaError_t err = cudaLaunchKernelEx(&config, AddOne, in, out, n4, form);
  if (err != cudaSuccess) printf("launch (form %d): %s\n", form, cudaGetErrorString(err));
}

// `kernels` dependent kernels ping-ponging between a and b; with two lanes, every third kernel
// runs on lane 1 over its own buffers c/d, and lane 0 waits for lane 1 every 8 kernels.
cudaGraphExec_t Capture(int kernels, int form, bool two_lanes, int blocks, float4* buf[4], int n4,
                        cudaStream_t s0, cudaStream_t s1, int* lane0_count) {
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
  if (two_lanes) {
    CK(cudaEventRecord(fork, s0));
    CK(cudaStreamWaitEvent(s1, fork));
  }
  int on0 = 0, on1 = 0;
  for (int i = 0; i < kernels; ++i) {
    if (two_lanes && i % 3 == 2) {
      Launch(s1, form, blocks, buf[2 + on1 % 2], buf[2 + (on1 + 1) % 2], n4);
      ++on1;
      continue;
    }
    if (two_lanes && i % 8 == 0 && on1 > 0) {
      CK(cudaEventRecord(join, s1));
      CK(cudaStreamWaitEvent(s0, join));
    }
    Launch(s0, form, blocks, buf[on0 % 2], buf[(on0 + 1) % 2], n4);
    ++on0;
  }
  if (two_lanes) {
    CK(cudaEventRecord(join, s1));
    CK(cudaStreamWaitEvent(s0, join));
  }
  cudaGraph_t g;
  cudaError_t err = cudaStreamEndCapture(s0, &g);
  if (err != cudaSuccess) {
    printf("capture (form %d, %s): %s\n", form, two_lanes ? "2 lanes" : "1 lane",
           cudaGetErrorString(err));
    cudaGetLastError();
    return nullptr;
  }
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  *lane0_count = on0;
  return exec;
}

int main(int argc, char** argv) {
  const int kernels = argc > 1 ? atoi(argv[1]) : 200;
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  struct Shape {
    int n4, blocks;
  };
  // 256 KiB on 64 blocks (latency-bound), 1 MiB on 132, 16 MiB on 1056 (several waves).
  const Shape shapes[] = {{1 << 14, 64}, {1 << 16, 132}, {1 << 20, 1056}};
  for (const Shape& shape : shapes) {
    float4* buf[4];
    for (float4*& b : buf) CK(cudaMalloc(&b, shape.n4 * sizeof(float4)));
    for (int two = 0; two < 2; ++two) {
      for (int form = kPlain; form <= kTriggerLate; ++form) {
        for (float4* b : buf) CK(cudaMemset(b, 0, shape.n4 * sizeof(float4)));
        int on0 = 0;
        cudaGraphExec_t exec =
            Capture(kernels, form, two == 1, shape.blocks, buf, shape.n4, s0, s1, &on0);
        if (exec == nullptr) continue;
        // One replay from zeros, checked: every element counts lane 0's kernels.
        CK(cudaGraphLaunch(exec, s0));
        CK(cudaStreamSynchronize(s0));
        std::vector<float> host(shape.n4 * 4);
        CK(cudaMemcpy(host.data(), buf[on0 % 2], host.size() * sizeof(float),
                      cudaMemcpyDeviceToHost));
        long wrong = 0;
        for (float v : host) wrong += v != static_cast<float>(on0);
        std::vector<float> ms;
        for (int r = 0; r < 60; ++r) {
          CK(cudaEventRecord(start, s0));
          CK(cudaGraphLaunch(exec, s0));
          CK(cudaEventRecord(stop, s0));
          CK(cudaEventSynchronize(stop));
          float t = 0;
          CK(cudaEventElapsedTime(&t, start, stop));
          if (r >= 10) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        printf("%7d KiB %4d blocks %-8s %-28s %8.4f ms  %6.3f us/kernel  wrong %ld\n",
               shape.n4 * 16 / 1024, shape.blocks, two ? "2 lanes" : "1 lane", kFormNames[form],
               ms[ms.size() / 2], 1000.0 * ms[ms.size() / 2] / kernels, wrong);
        CK(cudaGraphExecDestroy(exec));
      }
    }
    for (float4* b : buf) CK(cudaFree(b));
  }
  return 0;
}
