#include "src/ops/op_helpers.h"

namespace reprise::ops {

absl::Status CheckArity(absl::Span<const TensorSpec> inputs, int count) {
  if (static_cast<int>(inputs.size()) != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("takes ", count, " inputs, got ", inputs.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(const TensorSpec& spec, int rank, absl::string_view what) {
  if (spec.shape.rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must have rank ", rank, ", got ", spec.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckFloat(const TensorSpec& spec, absl::string_view what) {
  if (!IsFloat(spec.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a float tensor, got ", spec.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(const TensorSpec& spec, DType dtype, absl::string_view what) {
  if (spec.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", DTypeName(dtype), ", got ", spec.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace reprise::ops
