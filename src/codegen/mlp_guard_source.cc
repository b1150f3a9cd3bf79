#include "src/codegen/mlp_guard_source.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/mlp_step_layout.h"
#include "src/util/checked_math.h"

namespace reprise::codegen {
namespace {

// One parameter tensor of layer l (every model's) and its step-start copy in the workspace.
struct StartCopy {
  std::string param;  // The kernel parameter: w<l>, b<l>, vw<l> or vb<l>.
  int64_t offset;     // Of the copy in the workspace.
  int64_t floats;
};

// Double-buffered plans copy nothing: every parameter's second buffer keeps the step's start.
std::vector<StartCopy> StartCopies(const MlpStepPlan& plan, int l) {
  if (plan.double_buffered) return {};
  const int64_t weights = int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l];
  const int64_t biases = int64_t{plan.models} * plan.widths[l + 1];
  return {{absl::StrCat("w", l), plan.grad_w_offset[l], weights},
          {absl::StrCat("b", l), plan.grad_b_offset[l], biases},
          {absl::StrCat("vw", l), plan.start_vw_offset[l], weights},
          {absl::StrCat("vb", l), plan.start_vb_offset[l], biases}};
}

// 16-byte copies: the copies' offsets are 128-byte aligned; the parameters where the target says.
const char* Vec(const MlpStepPlan& plan, int64_t floats) {
  return plan.target.aligned && floats % 4 == 0 ? "true" : "false";
}

}  // namespace

std::string GuardCopySource(const MlpStepPlan& plan, const std::vector<int>& layers,
                            const std::string& tasks) {
  const int64_t chunk = 4 * int64_t{plan.target.threads};
  std::vector<StartCopy> copies;
  for (int l : layers) {
    for (StartCopy& copy : StartCopies(plan, l)) copies.push_back(std::move(copy));
  }
  int64_t total_chunks = 0;
  for (const StartCopy& copy : copies) total_chunks += (copy.floats + chunk - 1) / chunk;
  std::string code;
  int64_t first_chunk = 0;
  for (const StartCopy& copy : copies) {
    absl::StrAppend(&code, "    mlpg::CopyStart<", tasks, ", ", Vec(plan, copy.floats), ">(ws + ",
                    copy.offset, ", ", copy.param, ", ", copy.floats, ", ", first_chunk, ", ",
                    total_chunks, ");\n");
    first_chunk += (copy.floats + chunk - 1) / chunk;
  }
  return code;
}

std::string GuardRestoreSource(const MlpStepPlan& plan) {
  std::string code;
  for (int l = 0; l < plan.layers(); ++l) {
    for (const StartCopy& copy : StartCopies(plan, l)) {
      absl::StrAppend(&code, "      mlpg::Restore<", Vec(plan, copy.floats), ">(", copy.param,
                      ", ws + ", copy.offset, ", ", copy.floats, ");\n");
    }
  }
  return code;
}

int64_t MlpStepShadowFloats(const std::vector<int64_t>& widths, int64_t models) {
  // Saturates rather than wraps: the shape rule asks before any width has been checked.
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const int64_t weights = SaturatingMul(models, SaturatingMul(widths[l + 1], widths[l]));
    const int64_t biases = SaturatingMul(models, widths[l + 1]);
    if (weights > kMost / 4 || biases > kMost / 4) return kMost;
    total = SaturatingAdd(total, 2 * mlp_layout::Align32(weights));
    total = SaturatingAdd(total, 2 * mlp_layout::Align32(biases));
  }
  return total;
}

std::string ParityPointersSource(const MlpStepPlan& plan) {
  std::string code = plan.deferred_verdict ? std::string("  const bool flip = verdict.flip;\n")
                                           : absl::StrCat("  const bool flip = barrier[",
                                                          kMlpStepParityWord, "] != 0u;\n");
  for (int l = 0; l < plan.layers(); ++l) {
    for (const auto& [param, offset] :
         {std::pair{"w", plan.shadow_w_offset[l]}, std::pair{"b", plan.shadow_b_offset[l]},
          std::pair{"vw", plan.shadow_vw_offset[l]}, std::pair{"vb", plan.shadow_vb_offset[l]}}) {
      absl::StrAppend(&code, "  float* const ", param, l, "_now = flip ? shadow + ", offset, " : ",
                      param, l, ";\n  float* const ", param, l, "_next = flip ? ", param, l,
                      " : shadow + ", offset, ";\n");
    }
  }
  return code;
}

void LayOutShadow(MlpStepPlan& plan) {
  plan.double_buffered = true;
  for (auto* offsets : {&plan.shadow_w_offset, &plan.shadow_b_offset, &plan.shadow_vw_offset,
                        &plan.shadow_vb_offset}) {
    offsets->clear();
  }
  int64_t at = 0;
  for (int l = 0; l < plan.layers(); ++l) {
    const int64_t weights =
        mlp_layout::Align32(int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l]);
    const int64_t biases = mlp_layout::Align32(int64_t{plan.models} * plan.widths[l + 1]);
    plan.shadow_w_offset.push_back(at);
    plan.shadow_vw_offset.push_back(at + weights);
    plan.shadow_b_offset.push_back(at + 2 * weights);
    plan.shadow_vb_offset.push_back(at + 2 * weights + biases);
    at += 2 * weights + 2 * biases;
  }
}

}  // namespace reprise::codegen
