// Programmatic dependent launch (PDL): a kernel launched with the programmatic-serialization
// attribute may be scheduled before the kernel ahead of it in the stream has finished, so it must
// not touch memory until `griddepcontrol.wait` says its producers are done and their writes
// visible. Every kernel the engine generates gets that wait as the first statement of its body,
// put there by WithProducerWait; launched without the attribute (or on a GPU before sm_90, where
// the wait compiles to nothing) it returns at once. Launches that carry the attribute:
// ops::NvrtcKernel, with TrainOptions::kernels.dependent_launch (docs/engine.md).
#ifndef REPRISE_SRC_CODEGEN_GRID_DEPENDENCY_H_
#define REPRISE_SRC_CODEGEN_GRID_DEPENDENCY_H_

#include <optional>
#include <string>

namespace reprise::codegen {

// The function every generated kernel calls first: waits for the grids it depends on.
inline constexpr char kProducerWaitCall[] = "reprise_wait_for_producers();";

// `code` with the wait's definition put before it and kProducerWaitCall put first in the body of
// the __global__ function `name` (found as `__global__ ... name(...) {`, its parameter list's
// parentheses matched); nullopt where `code` has no such definition.
std::optional<std::string> WithProducerWait(const std::string& code, const std::string& name);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_GRID_DEPENDENCY_H_
