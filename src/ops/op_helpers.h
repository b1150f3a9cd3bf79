// Small helpers the op families share: spec checks with uniform messages, float dispatch.
#ifndef REPRISE_SRC_OPS_OP_HELPERS_H_
#define REPRISE_SRC_OPS_OP_HELPERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/ir/host_tensor.h"

namespace reprise::ops {

// InvalidArgument unless `inputs` has `count` entries.
absl::Status CheckArity(absl::Span<const TensorSpec> inputs, int count);
// InvalidArgument unless the spec has the rank and (if given) the dtype.
absl::Status CheckRank(const TensorSpec& spec, int rank, absl::string_view what);
absl::Status CheckFloat(const TensorSpec& spec, absl::string_view what);
absl::Status CheckDType(const TensorSpec& spec, DType dtype, absl::string_view what);

// Calls fn.template operator()<T>() with T = float or double by `dtype`.
template <typename Fn>
absl::Status DispatchFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn.template operator()<float>();
    case DType::kFloat64:
      return fn.template operator()<double>();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("expected a float tensor, got ", DTypeName(dtype)));
  }
}

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_OP_HELPERS_H_
