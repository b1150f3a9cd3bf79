// out += acc over a tensor of float32, bfloat16 or float16 elements, summed in float32 and rounded
// once to the type: the sum a convolution's data gradient takes where cuDNN's graph API has no
// fused add for it (src/ops/conv.cc). Abseil-free: the kernel's own file is compiled by nvcc apart
// from the library's C++ (CMakeLists.txt).
#ifndef REPRISE_SRC_RUNTIME_ADD_INTO_KERNEL_H_
#define REPRISE_SRC_RUNTIME_ADD_INTO_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace reprise::runtime {

enum class AddIntoType : uint8_t { kFloat32, kBFloat16, kFloat16 };

// Enqueues out[i] = out[i] + acc[i] for i < count on `stream`; the launch's error, if any.
cudaError_t LaunchAddInto(void* out, const void* acc, uint64_t count, AddIntoType type,
                          cudaStream_t stream);

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_ADD_INTO_KERNEL_H_
