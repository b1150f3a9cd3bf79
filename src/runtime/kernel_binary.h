// KernelBinary: what the kernel store keeps for one compiled kernel, in memory and in lower layers
// such as the on-disk cache. The PTX is kept beside the CUBIN, so that a dump or a driver JIT for
// another architecture can use it.
#ifndef REPRISE_SRC_RUNTIME_KERNEL_BINARY_H_
#define REPRISE_SRC_RUNTIME_KERNEL_BINARY_H_

#include <string>

namespace reprise::runtime {

struct KernelBinary {
  std::string name;  // The kernel's function name.
  std::string arch;  // e.g. "sm_90".
  std::string cubin;
  std::string ptx;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_KERNEL_BINARY_H_
