#include "reprise/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/checked_math.h"

namespace reprise {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
    case DType::kInt32:
      return "i32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "f16";
  }
  return "?";
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

bool IsFloat(DType dtype) { return dtype != DType::kInt32; }

bool IsLowPrecision(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

absl::string_view LayoutName(Layout layout) { return layout == Layout::kNHWC ? "NHWC" : "NCHW"; }

int64_t Shape::NumElements() const { return CheckedProduct(dims_).value_or(-1); }

absl::StatusOr<int64_t> Shape::CheckedNumElements() const {
  std::optional<int64_t> n = CheckedProduct(dims_);
  if (!n.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ToString(), " has a negative extent or more elements than int64 can count"));
  }
  return *n;
}

std::string Shape::ToString() const { return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]"); }

absl::StatusOr<int64_t> TensorSpec::CheckedBytes() const {
  std::optional<int64_t> n = CheckedProduct(shape.dims());
  std::optional<int64_t> bytes = n.has_value() ? CheckedMul(*n, DTypeSize(dtype)) : std::nullopt;
  if (!bytes.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToString(), " has more elements or bytes than int64 can count"));
  }
  return *bytes;
}

std::string TensorSpec::ToString() const {
  return absl::StrCat(DTypeName(dtype), shape.ToString());
}

}  // namespace reprise
