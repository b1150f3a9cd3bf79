// Fills parameters, state and constants from their Initializer. The random stream depends only on
// the seed and the node's name (splitmix64), so the CPU reference and every GPU run start from
// the same bits on any machine.
#ifndef REPRISE_SRC_IR_INITIALIZER_H_
#define REPRISE_SRC_IR_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"

namespace reprise::ir {

// Fills `tensor` (f32, f64 or i32) as `init` says; `seed` and `name` pick the random stream.
// InvalidArgument naming `what` and the value unless every argument of `init` is finite and within
// float32's range (values are rounded through float) and a uniform range has low <= high.
absl::Status CheckInitializer(const Initializer& init, absl::string_view what);

void FillInitial(const Initializer& init, uint64_t seed, absl::string_view name,
                 HostTensor& tensor);

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_INITIALIZER_H_
