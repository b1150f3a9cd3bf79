// Which form of the memory-bound row kernels a lowering picks: by default the one-pass kernels
// (softmax cross-entropy's XentRowsOnePass, the layer-norm backward's LayerNormBackward) wherever
// their shapes and alignment allow; with REPRISE_TWO_PASS_ROW_KERNELS=1 in the environment, the
// kernels they replaced (two reads of the logits; dx, partials and total as three launches), so
// that a benchmark can measure both in one build. Read once per process.
#ifndef REPRISE_SRC_OPS_ROW_KERNEL_CHOICE_H_
#define REPRISE_SRC_OPS_ROW_KERNEL_CHOICE_H_

#include <cstdlib>
#include <string_view>

namespace reprise::ops {

inline bool TwoPassRowKernelsForced() {
  static const bool forced = [] {
    const char* value = std::getenv("REPRISE_TWO_PASS_ROW_KERNELS");
    return value != nullptr && *value != '\0' && std::string_view(value) != "0";
  }();
  return forced;
}

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_ROW_KERNEL_CHOICE_H_
