#include "src/codegen/mlp_guard_source.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reprise::codegen {

std::string GuardRestoreSource(const MlpStepPlan& plan) {
  std::string code;
  for (int l = 0; l < plan.layers(); ++l) {
    const int64_t weights = int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l];
    const int64_t biases = int64_t{plan.models} * plan.widths[l + 1];
    const std::pair<std::string, int64_t> copies[] = {
        {absl::StrCat("w", l, ", ws + ", plan.grad_w_offset[l], ", ", weights), weights},
        {absl::StrCat("b", l, ", ws + ", plan.grad_b_offset[l], ", ", biases), biases},
        {absl::StrCat("vw", l, ", ws + ", plan.start_vw_offset[l], ", ", weights), weights},
        {absl::StrCat("vb", l, ", ws + ", plan.start_vb_offset[l], ", ", biases), biases}};
    for (const auto& [args, n] : copies) {
      // The copies' offsets are 128-byte aligned; the parameters where the target says so.
      const bool vec = plan.target.aligned && n % 4 == 0;
      absl::StrAppend(&code, "      mlpg::Restore<", vec ? "true" : "false", ">(", args, ");\n");
    }
  }
  return code;
}

}  // namespace reprise::codegen
