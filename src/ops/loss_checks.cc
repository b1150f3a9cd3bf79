#include "src/ops/loss_checks.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::Status CheckLogitsAndLabels(absl::Span<const TensorSpec> in, int label_rank) {
  RETURN_IF_ERROR(CheckRank(in[0], label_rank + 1, "logits"));
  RETURN_IF_ERROR(CheckFloat(in[0], "logits"));
  RETURN_IF_ERROR(CheckRank(in[1], label_rank, "labels"));
  RETURN_IF_ERROR(CheckDType(in[1], DType::kInt32, "labels"));
  for (int d = 0; d < label_rank; ++d) {
    if (in[1].shape.dim(d) != in[0].shape.dim(d)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels ", in[1].ToString(), " do not match the ",
          label_rank == 1 ? "batch" : "models and batch", " of logits ", in[0].ToString()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LossClasses(const Attrs& attrs, const TensorSpec& logits) {
  const int64_t cols = logits.shape.dim(logits.shape.rank() - 1);
  auto it = attrs.find(kLossClassesAttr);
  if (it == attrs.end()) return cols;
  const int64_t* classes = std::get_if<int64_t>(&it->second);
  if (classes == nullptr) {
    return absl::InvalidArgumentError("attribute 'classes' must be an integer");
  }
  if (*classes < 1 || *classes > cols) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'classes' (", *classes,
                                                   ") must be in [1, ", cols,
                                                   "], the columns of logits ", logits.ToString()));
  }
  return *classes;
}

}  // namespace reprise::ops
