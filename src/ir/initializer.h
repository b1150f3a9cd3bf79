// Fills parameters, state and constants from their Initializer. The random stream depends only on
// the seed and the node's name (splitmix64), so the CPU reference and every GPU run start from
// the same bits on any machine.
#ifndef REPRISE_SRC_IR_INITIALIZER_H_
#define REPRISE_SRC_IR_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"

namespace reprise::ir {

// Fills `tensor` (f32, f64 or i32) as `init` says; `seed` and `name` pick the random stream.
// InvalidArgument naming `what` and the value unless every argument of `init` is finite and within
// float32's range (values are rounded through float) and a uniform range has low <= high.
absl::Status CheckInitializer(const Initializer& init, absl::string_view what);

// Large tensors are filled on several threads; the values are those of one thread (each element
// of a uniform takes the next SplitMix64 draw of the tensor's stream, whatever the thread count).
void FillInitial(const Initializer& init, uint64_t seed, absl::string_view name,
                 HostTensor& tensor);

// Elements [first, first + out.size()) of what FillInitial writes into a float32 tensor named
// `name`, the same bits, into `out`: for drawing a large tensor in pieces (several threads each).
void FillInitialSlice(const Initializer& init, uint64_t seed, absl::string_view name, int64_t first,
                      absl::Span<float> out);

// Whether FillInitial writes only zero bits for `init` in every dtype (zeros, or the constant +0;
// not -0): a device buffer can then be cleared instead of filled on the host and copied.
bool WritesZeroBits(const Initializer& init);

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_INITIALIZER_H_
