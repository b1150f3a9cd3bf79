// What one grid barrier of the whole-step MLP kernels costs, by where its word lies and by how the
// blocks arrive and wait: one block per multiprocessor (as those kernels run) crosses ROUNDS
// barriers on one word (block 0 adds 2^31 - (blocks - 1), the others 1, so bit 31 flips when the
// last arrives: mlp_step_device.inc), for words at CANDIDATES offsets 4 KiB apart in one
// allocation, in four forms of arrival and wait:
//   0. a fence.acq_rel, then a relaxed add; every block spins on acquire loads (the kernels' form);
//   1. as 0, but the arrival that flips the bit leaves after a second fence instead of loading;
//   2. an acq_rel add; every block spins;
//   3. an acq_rel add; the arrival that flips the bit leaves at once.
// Prints, per form, the median time per barrier at each offset (of 7 launches, CUDA events) and
// their spread. Not part of the build: `nvcc -O2 -arch=sm_90 -o barrier_placement
// tools/device/barrier_placement.cu`, then `./barrier_placement [CANDIDATES] [ROUNDS]`.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

__device__ unsigned AcquireLoad(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ unsigned FenceThenAdd(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("fence.acq_rel.gpu;\n\tatom.relaxed.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__device__ unsigned AcqRelAdd(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__global__ void Barriers(unsigned* word, int rounds, int form) {
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
      const unsigned old = form >= 2 ? AcqRelAdd(word, add) : FenceThenAdd(word, add);
      const bool flipped_it = ((old ^ (old + add)) & 0x80000000u) != 0;
      if (form == 1 && flipped_it) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else if (!(form == 3 && flipped_it)) {
        while (((old ^ AcquireLoad(word)) & 0x80000000u) == 0) {
        }
      }
    }
    __syncthreads();
  }
}

int main(int argc, char** argv) {
  const int candidates = argc > 1 ? std::atoi(argv[1]) : 64;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (candidates < 1 || rounds < 1) {
    std::printf("usage: barrier_placement [CANDIDATES >= 1] [ROUNDS >= 1]\n");
    return 2;
  }
  int device = 0, sms = 0;
  CK(cudaGetDevice(&device));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t stride = 4096;
  unsigned* base = nullptr;
  CK(cudaMalloc(&base, stride * candidates));
  CK(cudaMemset(base, 0, stride * candidates));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  const char* names[] = {"fence, relaxed add, all spin", "fence, relaxed add, last fences",
                         "acq_rel add, all spin", "acq_rel add, last leaves"};
  for (int form = 0; form < 4; ++form) {
    std::printf("== form %d: %s\n", form, names[form]);
    std::vector<float> per_barrier_ns;
    for (int c = 0; c < candidates; ++c) {
      unsigned* word = base + c * (stride / sizeof(unsigned));
      void* args[] = {&word, &rounds, &form};
      std::vector<float> ms;
      for (int launch = 0; launch < 8; ++launch) {  // The first is a warm-up.
        CK(cudaEventRecord(start));
        CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(Barriers), dim3(sms), dim3(256),
                                       args, 0, nullptr));
        CK(cudaEventRecord(stop));
        CK(cudaEventSynchronize(stop));
        float t = 0;
        CK(cudaEventElapsedTime(&t, start, stop));
        if (launch > 0) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      per_barrier_ns.push_back(ms[ms.size() / 2] * 1e6f / rounds);
      std::printf("offset %8zu: %.1f ns per barrier\n", c * stride, per_barrier_ns.back());
    }
    std::sort(per_barrier_ns.begin(), per_barrier_ns.end());
    std::printf("%d blocks, %d barriers a launch, %d offsets: min %.1f, median %.1f, max %.1f ns\n",
                sms, rounds, candidates, per_barrier_ns.front(),
                per_barrier_ns[per_barrier_ns.size() / 2], per_barrier_ns.back());
  }
  CK(cudaFree(base));
  return 0;
}
