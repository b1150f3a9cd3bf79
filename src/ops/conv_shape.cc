#include "src/ops/conv_shape.h"

#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<int64_t> IntAttrOr(const Attrs& attrs, absl::string_view key, int64_t fallback,
                                  int64_t minimum) {
  int64_t value = fallback;
  if (attrs.contains(std::string(key))) {
    ASSIGN_OR_RETURN(value, ir::IntAttr(attrs, key));
  }
  if (value < minimum) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", key, "' must be at least ", minimum, ", got ", value));
  }
  return value;
}

absl::StatusOr<int64_t> RequiredIntAttr(const Attrs& attrs, absl::string_view key,
                                        int64_t minimum) {
  ASSIGN_OR_RETURN(const int64_t value, ir::IntAttr(attrs, key));
  if (value < minimum) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", key, "' must be at least ", minimum, ", got ", value));
  }
  return value;
}

// The attributes all three convolution ops share.
absl::StatusOr<runtime::ConvShape> ReadConvAttrs(const Attrs& attrs, DType dtype) {
  runtime::ConvShape s;
  s.dtype = dtype;
  ASSIGN_OR_RETURN(s.layout, LayoutAttr(attrs));
  ASSIGN_OR_RETURN(s.stride_h, IntAttrOr(attrs, "stride_h", 1, 1));
  ASSIGN_OR_RETURN(s.stride_w, IntAttrOr(attrs, "stride_w", 1, 1));
  ASSIGN_OR_RETURN(s.pad_h, IntAttrOr(attrs, "pad_h", 0, 0));
  ASSIGN_OR_RETURN(s.pad_w, IntAttrOr(attrs, "pad_w", 0, 0));
  ASSIGN_OR_RETURN(s.dilation_h, IntAttrOr(attrs, "dilation_h", 1, 1));
  ASSIGN_OR_RETURN(s.dilation_w, IntAttrOr(attrs, "dilation_w", 1, 1));
  ASSIGN_OR_RETURN(s.groups, IntAttrOr(attrs, "groups", 1, 1));
  return s;
}

struct FilterDims {
  int64_t k = 0, c = 0, r = 0, s = 0;
};

FilterDims FilterDimsOf(const Shape& shape, Layout layout) {
  if (layout == Layout::kNHWC) return {shape.dim(0), shape.dim(3), shape.dim(1), shape.dim(2)};
  return {shape.dim(0), shape.dim(1), shape.dim(2), shape.dim(3)};
}

// Both operands 4-D floats of one dtype.
absl::Status CheckOperands(const TensorSpec& a, absl::string_view a_name, const TensorSpec& b,
                           absl::string_view b_name) {
  RETURN_IF_ERROR(CheckRank(a, 4, a_name));
  RETURN_IF_ERROR(CheckRank(b, 4, b_name));
  RETURN_IF_ERROR(CheckFloat(a, a_name));
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        a_name, " and ", b_name, " differ in dtype: ", a.ToString(), " and ", b.ToString()));
  }
  return absl::OkStatus();
}

std::string Operands(absl::string_view a_name, const TensorSpec& a, absl::string_view b_name,
                     const TensorSpec& b, const runtime::ConvShape& s) {
  return absl::StrCat(a_name, " ", a.ToString(), " and ", b_name, " ", b.ToString(), " (",
                      LayoutName(s.layout), ", groups ", s.groups, ")");
}

absl::Status CheckGroups(const runtime::ConvShape& s, const std::string& operands) {
  if (s.c % s.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input channels C = ", s.c, " are not divisible by groups = ", s.groups, ": ", operands));
  }
  if (s.k % s.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output channels K = ", s.k, " are not divisible by groups = ", s.groups, ": ", operands));
  }
  return absl::OkStatus();
}

// The output extent, or -1 when the padding or the dilated kernel overflows int64.
int64_t OutputSize(int64_t in, int64_t pad, int64_t dilation, int64_t kernel, int64_t stride) {
  std::optional<int64_t> padded = CheckedMul(pad, 2);
  if (padded.has_value()) padded = CheckedAdd(*padded, in);
  std::optional<int64_t> reach = CheckedMul(dilation, kernel - 1);
  if (!padded.has_value() || !reach.has_value()) return -1;
  const std::optional<int64_t> span = CheckedSub(*padded, *reach);
  if (!span.has_value()) return -1;
  return *span - 1 < 0 ? 0 : (*span - 1) / stride + 1;
}

// Fills p and q from the rest; InvalidArgument for a zero extent or an empty output.
absl::Status FillOutput(runtime::ConvShape& s, const std::string& operands) {
  if (s.n <= 0 || s.c <= 0 || s.h <= 0 || s.w <= 0 || s.k <= 0 || s.r <= 0 || s.s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a dimension is zero: ", operands));
  }
  s.p = OutputSize(s.h, s.pad_h, s.dilation_h, s.r, s.stride_h);
  s.q = OutputSize(s.w, s.pad_w, s.dilation_w, s.s, s.stride_w);
  if (s.p < 0 || s.q < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("padding ", s.pad_h, "x", s.pad_w, " or dilation ", s.dilation_h, "x",
                     s.dilation_w, " of the ", s.r, "x", s.s, " kernel overflows int64 on the ",
                     s.h, "x", s.w, " input: ", operands));
  }
  if (s.p <= 0 || s.q <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero output size ", s.p, "x", s.q, ": the ", s.r, "x", s.s, " kernel with dilation ",
        s.dilation_h, "x", s.dilation_w, " does not fit the ", s.h, "x", s.w, " input padded by ",
        s.pad_h, "x", s.pad_w, " (stride ", s.stride_h, "x", s.stride_w, "): ", operands));
  }
  return absl::OkStatus();
}

// dy must be the forward's output.
absl::Status CheckOutputMatches(const runtime::ConvShape& s, const ActivationDims& dy,
                                const std::string& operands) {
  if (dy.h != s.p || dy.w != s.q) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy is ", dy.h, "x", dy.w, " but the forward convolution of a ", s.h, "x", s.w,
                     " input gives ", s.p, "x", s.q, " (kernel ", s.r, "x", s.s, ", stride ",
                     s.stride_h, "x", s.stride_w, ", pad ", s.pad_h, "x", s.pad_w, ", dilation ",
                     s.dilation_h, "x", s.dilation_w, "): ", operands));
  }
  return absl::OkStatus();
}

}  // namespace

ActivationDims ActivationDimsOf(const Shape& shape, Layout layout) {
  if (layout == Layout::kNHWC) return {shape.dim(0), shape.dim(3), shape.dim(1), shape.dim(2)};
  return {shape.dim(0), shape.dim(1), shape.dim(2), shape.dim(3)};
}

Shape ActivationShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNHWC ? Shape{n, h, w, c} : Shape{n, c, h, w};
}

Shape FilterShape(Layout layout, int64_t k, int64_t c, int64_t r, int64_t s) {
  return layout == Layout::kNHWC ? Shape{k, r, s, c} : Shape{k, c, r, s};
}

absl::StatusOr<runtime::ConvShape> Conv2dShape(const Attrs& attrs, const TensorSpec& x,
                                               const TensorSpec& w) {
  RETURN_IF_ERROR(CheckOperands(x, "x", w, "w"));
  ASSIGN_OR_RETURN(runtime::ConvShape s, ReadConvAttrs(attrs, x.dtype));
  const ActivationDims xd = ActivationDimsOf(x.shape, s.layout);
  const FilterDims fd = FilterDimsOf(w.shape, s.layout);
  s.n = xd.n, s.c = xd.c, s.h = xd.h, s.w = xd.w;
  s.k = fd.k, s.r = fd.r, s.s = fd.s;
  const std::string operands = Operands("x", x, "w", w, s);
  RETURN_IF_ERROR(CheckGroups(s, operands));
  if (fd.c * s.groups != s.c) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels mismatch: x has C = ", s.c, " but w expects ", fd.c, " per group x ",
                     s.groups, " groups = ", fd.c * s.groups, ": ", operands));
  }
  RETURN_IF_ERROR(FillOutput(s, operands));
  return s;
}

absl::StatusOr<runtime::ConvShape> Conv2dDgradShape(const Attrs& attrs, const TensorSpec& dy,
                                                    const TensorSpec& w) {
  RETURN_IF_ERROR(CheckOperands(dy, "dy", w, "w"));
  ASSIGN_OR_RETURN(runtime::ConvShape s, ReadConvAttrs(attrs, dy.dtype));
  ASSIGN_OR_RETURN(s.h, RequiredIntAttr(attrs, "input_h", 1));
  ASSIGN_OR_RETURN(s.w, RequiredIntAttr(attrs, "input_w", 1));
  const ActivationDims dyd = ActivationDimsOf(dy.shape, s.layout);
  const FilterDims fd = FilterDimsOf(w.shape, s.layout);
  s.n = dyd.n, s.c = fd.c * s.groups;
  s.k = fd.k, s.r = fd.r, s.s = fd.s;
  const std::string operands = Operands("dy", dy, "w", w, s);
  if (dyd.c != fd.k) {
    return absl::InvalidArgumentError(absl::StrCat("channels mismatch: dy has K = ", dyd.c,
                                                   " but w has K = ", fd.k, ": ", operands));
  }
  RETURN_IF_ERROR(CheckGroups(s, operands));
  RETURN_IF_ERROR(FillOutput(s, operands));
  RETURN_IF_ERROR(CheckOutputMatches(s, dyd, operands));
  return s;
}

absl::StatusOr<runtime::ConvShape> Conv2dWgradShape(const Attrs& attrs, const TensorSpec& x,
                                                    const TensorSpec& dy) {
  RETURN_IF_ERROR(CheckOperands(x, "x", dy, "dy"));
  ASSIGN_OR_RETURN(runtime::ConvShape s, ReadConvAttrs(attrs, x.dtype));
  ASSIGN_OR_RETURN(s.r, RequiredIntAttr(attrs, "kernel_h", 1));
  ASSIGN_OR_RETURN(s.s, RequiredIntAttr(attrs, "kernel_w", 1));
  const ActivationDims xd = ActivationDimsOf(x.shape, s.layout);
  const ActivationDims dyd = ActivationDimsOf(dy.shape, s.layout);
  s.n = xd.n, s.c = xd.c, s.h = xd.h, s.w = xd.w;
  s.k = dyd.c;
  const std::string operands = Operands("x", x, "dy", dy, s);
  if (xd.n != dyd.n) {
    return absl::InvalidArgumentError(absl::StrCat("batch mismatch: x has N = ", xd.n,
                                                   " but dy has N = ", dyd.n, ": ", operands));
  }
  RETURN_IF_ERROR(CheckGroups(s, operands));
  RETURN_IF_ERROR(FillOutput(s, operands));
  RETURN_IF_ERROR(CheckOutputMatches(s, dyd, operands));
  return s;
}

}  // namespace reprise::ops
