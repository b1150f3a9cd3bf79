// What choosing a step's buffers on the device costs, three ways, for the non-finite guard's
// double buffering (mlp_guard_device.inc): a step reads its values from one of two buffers and
// writes the update to the other; a step that applies flips which one is current, with no host
// call and no graph update.
//   fixed:       constant pointers, no choice (the floor; the step never flips);
//   word:        every thread loads a parity word first and picks its pointers from it, and the
//                last block to arrive flips it (the whole-step kernels' form: the load is one
//                dependent L2 round trip before the first load of the values);
//   conditional: an IF node with an ELSE body (CUDA 12.8+) whose two kernels have their buffers
//                as constants; the last block to arrive sets the condition for the next step
//                (cudaGraphSetConditional; a node has a handle of its own); each launch starts
//                from the first handle's default (a current), right for an even number of steps.
// Every step kernel is `blocks` blocks of 256 threads copying n floats plus one (about a phase of
// the MLP 8x256 step), and every block arrives on a counter at its end, so the forms differ only
// in the choice. A graph holds `steps` steps in a chain; prints the median µs per step over many
// launches, and checks the buffers (a step that read the wrong one leaves the wrong count). Not
// part of the build: `nvcc -O2 -arch=sm_90 -o parity_select tools/device/parity_select.cu`, then
// `./parity_select [STEPS (even)] [BLOCKS]`.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

constexpr int kThreads = 256;

// dst = src + 1, every thread a few elements.
__device__ void Copy(const float* __restrict__ src, float* __restrict__ dst, int n) {
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    dst[i] = src[i] + 1.0f;
  }
  __syncthreads();
}

// Whether this block arrived last on `arrivals` (which it then resets); every block's writes are
// visible to that one.
__device__ bool LastToArrive(unsigned* arrivals) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(arrivals, 1u) == gridDim.x - 1;
    if (last) *arrivals = 0;
  }
  __syncthreads();
  return last;
}

__global__ void FixedStep(const float* src, float* dst, int n, unsigned* arrivals) {
  Copy(src, dst, n);
  LastToArrive(arrivals);
}

// state[0]: 1 where b holds the current values; state[1]: the arrivals.
__global__ void WordStep(float* a, float* b, int n, unsigned* state) {
  const bool flip = state[0] != 0u;
  Copy(flip ? b : a, flip ? a : b, n);
  if (LastToArrive(state + 1) && threadIdx.x == 0) state[0] = flip ? 0u : 1u;
}

// The IF body (condition 1: a is current) and the ELSE body (0: b is current), each with its
// own constants; `next` is the condition once this step applies.
__global__ void ConditionalStep(const float* src, float* dst, int n, unsigned* arrivals,
                                cudaGraphConditionalHandle handle, unsigned next) {
  Copy(src, dst, n);
  if (LastToArrive(arrivals) && threadIdx.x == 0) cudaGraphSetConditional(handle, next);
}

cudaKernelNodeParams KernelNode(void* func, int blocks, void** args) {
  cudaKernelNodeParams p = {};
  p.func = func;
  p.gridDim = dim3(blocks);
  p.blockDim = dim3(kThreads);
  p.kernelParams = args;
  return p;
}

enum Form { kFixed = 0, kWord = 1, kConditional = 2 };
const char* kFormNames[] = {"fixed", "word", "conditional"};

struct Buffers {
  float *a, *b;
  unsigned* state;  // [0] parity (word), [1] arrivals.
  int n;
};

// A conditional node takes a handle of its own: step s's kernels set step s + 1's.
cudaGraphExec_t Build(Form form, int steps, int blocks, Buffers& buf,
                      std::vector<cudaGraphConditionalHandle>& handles) {
  cudaGraph_t graph;
  CK(cudaGraphCreate(&graph, 0));
  handles.assign(form == kConditional ? steps : 0, 0);
  for (cudaGraphConditionalHandle& h : handles) {
    CK(cudaGraphConditionalHandleCreate(&h, graph, 1u, cudaGraphCondAssignDefault));
  }
  unsigned* arrivals = buf.state + 1;
  unsigned zero = 0u, one = 1u;
  cudaGraphNode_t previous = nullptr;
  for (int s = 0; s < steps; ++s) {
    cudaGraphNode_t node;
    const int deps = previous == nullptr ? 0 : 1;
    if (form == kFixed) {
      void* args[] = {&buf.a, &buf.b, &buf.n, &arrivals};
      cudaKernelNodeParams p = KernelNode(reinterpret_cast<void*>(FixedStep), blocks, args);
      CK(cudaGraphAddKernelNode(&node, graph, &previous, deps, &p));
    } else if (form == kWord) {
      void* args[] = {&buf.a, &buf.b, &buf.n, &buf.state};
      cudaKernelNodeParams p = KernelNode(reinterpret_cast<void*>(WordStep), blocks, args);
      CK(cudaGraphAddKernelNode(&node, graph, &previous, deps, &p));
    } else {
      cudaGraphNodeParams cp = {};
      cp.type = cudaGraphNodeTypeConditional;
      cp.conditional.handle = handles[s];
      cp.conditional.type = cudaGraphCondTypeIf;
      cp.conditional.size = 2;
      CK(cudaGraphAddNode(&node, graph, &previous, nullptr, deps, &cp));
      // Body 0 runs where the condition is 1 (a current): a -> b, then b is; body 1 the reverse.
      for (int body = 0; body < 2; ++body) {
        float* src = body == 0 ? buf.a : buf.b;
        float* dst = body == 0 ? buf.b : buf.a;
        unsigned* next = body == 0 ? &zero : &one;
        void* args[] = {&src, &dst, &buf.n, &arrivals, &handles[(s + 1) % steps], next};
        cudaKernelNodeParams p = KernelNode(reinterpret_cast<void*>(ConditionalStep), blocks, args);
        cudaGraphNode_t kernel;
        CK(cudaGraphAddKernelNode(&kernel, cp.conditional.phGraph_out[body], nullptr, 0, &p));
      }
    }
    previous = node;
  }
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphDestroy(graph));
  return exec;
}

// After `total` steps from a = 0, b = 0 with a current: the current buffer holds `total` and the
// other `total - 1` (fixed: b = a + 1 = 1, a = 0).
bool Check(Form form, const Buffers& buf, long long total) {
  std::vector<float> a(buf.n), b(buf.n);
  CK(cudaMemcpy(a.data(), buf.a, buf.n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), buf.b, buf.n * sizeof(float), cudaMemcpyDeviceToHost));
  const bool a_current = total % 2 == 0;
  const float want_a = form == kFixed ? 0.0f : static_cast<float>(a_current ? total : total - 1);
  const float want_b = form == kFixed ? 1.0f : static_cast<float>(a_current ? total - 1 : total);
  for (int i = 0; i < buf.n; ++i) {
    if (a[i] != want_a || b[i] != want_b) {
      printf("%s: element %d after %lld steps: a %g b %g, expected %g and %g\n", kFormNames[form],
             i, total, a[i], b[i], want_a, want_b);
      return false;
    }
  }
  return true;
}

int main(int argc, char** argv) {
  // Even: every launch then starts and ends with a current, as the conditional form assumes.
  const int steps = (argc > 1 ? atoi(argv[1]) : 32) / 2 * 2;
  const int blocks = argc > 2 ? atoi(argv[2]) : 132;
  const int launches = 50, rounds = 21;
  Buffers buf;
  buf.n = blocks * kThreads * 2;
  CK(cudaMalloc(&buf.a, buf.n * sizeof(float)));
  CK(cudaMalloc(&buf.b, buf.n * sizeof(float)));
  CK(cudaMalloc(&buf.state, 2 * sizeof(unsigned)));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  printf("%d steps a graph, %d blocks of %d threads, %d floats\n", steps, blocks, kThreads, buf.n);
  bool ok = true;
  // Twice in turn, so that neither form always runs first.
  for (int pass = 0; pass < 2; ++pass) {
    for (int f = 0; f < 3; ++f) {
      const Form form = static_cast<Form>(f);
      CK(cudaMemset(buf.a, 0, buf.n * sizeof(float)));
      CK(cudaMemset(buf.b, 0, buf.n * sizeof(float)));
      CK(cudaMemset(buf.state, 0, 2 * sizeof(unsigned)));
      std::vector<cudaGraphConditionalHandle> handles;
      cudaGraphExec_t exec = Build(form, steps, blocks, buf, handles);
      CK(cudaGraphUpload(exec, stream));
      long long total = 0;
      std::vector<float> us;
      for (int r = 0; r < rounds; ++r) {
        CK(cudaEventRecord(start, stream));
        for (int l = 0; l < launches; ++l) CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(stop, stream));
        CK(cudaEventSynchronize(stop));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, start, stop));
        if (r > 0) us.push_back(1000.0f * ms / (launches * steps));  // Round 0 warms up.
        total += static_cast<long long>(launches) * steps;
      }
      std::sort(us.begin(), us.end());
      const bool right = Check(form, buf, total);
      ok = ok && right;
      printf("pass %d %-12s %.3f us a step (min %.3f, max %.3f)%s\n", pass, kFormNames[form],
             us[us.size() / 2], us.front(), us.back(), right ? "" : "  WRONG");
      CK(cudaGraphExecDestroy(exec));
    }
  }
  return ok ? 0 : 1;
}
