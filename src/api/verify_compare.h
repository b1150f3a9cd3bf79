// Verify mode's comparison, on host copies of what the captured and the eager run left after a
// step: the first element whose bits differ, in the order the step wrote the tensors, so the
// difference reported is the earliest one, most likely the cause of the others. Host-only.
#ifndef REPRISE_SRC_API_VERIFY_COMPARE_H_
#define REPRISE_SRC_API_VERIFY_COMPARE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "reprise/trainer.h"

namespace reprise {

// One value of `dtype` at `data` exactly: "0.100000001 (0x3dcccccd)", "-7 (0xfffffff9)".
std::string ExactElementText(const char* data, DType dtype);

struct ElementDifference {
  int64_t element = 0;
  std::string a, b;  // ExactElementText of each side.
};

// The first element of `dtype` whose bytes differ between `a` and `b` (same size, a whole number
// of elements), or nothing when they agree bit for bit. NaNs with the same bits agree; 0 and -0
// do not.
std::optional<ElementDifference> FirstDifference(absl::string_view a, absl::string_view b,
                                                 DType dtype);

// A tensor verify compares, and where each run's copy of it sits in that run's host snapshot.
struct ComparedTensor {
  std::string name;
  std::string kind;  // As VerifyMismatch::kind.
  std::string node, op;
  DType dtype = DType::kFloat32;
  int64_t offset = 0, bytes = 0;  // In the snapshot.
  int order = 0;                  // The launch that writes it: earlier launches first.
};

// The first difference between the snapshots `graph` and `eager` over `tensors`, taken in the
// order given (the caller sorts them by `order`), reported for step `step`; nothing when every
// tensor agrees.
std::optional<VerifyMismatch> CompareSnapshots(absl::Span<const ComparedTensor> tensors,
                                               absl::string_view graph, absl::string_view eager,
                                               int step);

}  // namespace reprise

#endif  // REPRISE_SRC_API_VERIFY_COMPARE_H_
