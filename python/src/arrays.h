// NumPy arrays in and out of the bindings: arrays that own the values a call returns, the element
// types as messages name them, and a host array checked and copied into an input of a trainer or a
// forward runner.
#ifndef REPRISE_PYTHON_SRC_ARRAYS_H_
#define REPRISE_PYTHON_SRC_ARRAYS_H_

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "python/src/errors.h"
#include "reprise/tensor.h"

namespace reprise::python {

// A NumPy array that owns `values`, of shape `dims` where that holds as many values, else flat.
template <typename T>
nanobind::ndarray<nanobind::numpy, T> OwnedArray(std::vector<T> values,
                                                 const std::vector<int64_t>& dims) {
  auto owned = std::make_unique<std::vector<T>>(std::move(values));
  std::vector<size_t> shape = {owned->size()};
  if (Shape(dims).NumElements() == static_cast<int64_t>(owned->size())) {
    shape.assign(dims.begin(), dims.end());
  }
  T* data = owned->data();
  nanobind::capsule owner(owned.release(),
                          [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nanobind::ndarray<nanobind::numpy, T>(data, shape.size(), shape.data(), owner);
}

// An array element type as messages name it: "int32", "uint16", "float32", "bfloat16", ...
std::string DTypeText(const nanobind::dlpack::dtype& dtype);

// InvalidArgument, raised as ValueError, unless `array` has input `name`'s shape `spec`, or is flat
// with as many values (the C++ API takes a flat span).
template <typename Array>
void CheckInputShape(const std::string& name, const TensorSpec& spec, const Array& array) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < array.ndim(); ++i) dims.push_back(array.shape(i));
  const bool flat =
      array.ndim() == 1 && static_cast<int64_t>(array.size()) == spec.shape.NumElements();
  if (dims != spec.shape.dims() && !flat) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(),
                                                         "; got an array of shape ",
                                                         Shape(std::move(dims)).ToString())));
  }
}

// Copies a host array into `target`'s input `name` (Trainer::SetInput, ForwardRunner::SetInput):
// int32 data as int32, anything else as float32, whose other dtypes reach here only for names the
// graph lacks (the C++ call names that error).
template <typename Target, typename Array>
void CopyHostInput(Target& target, const std::string& name, const Array& array) {
  if (array.dtype() == nanobind::dtype<int32_t>()) {
    ThrowIfError(target.SetInput(
        name, absl::Span<const int32_t>(static_cast<const int32_t*>(array.data()), array.size())));
    return;
  }
  const bool f32 = array.dtype() == nanobind::dtype<float>();
  ThrowIfError(target.SetInput(
      name, absl::Span<const float>(f32 ? static_cast<const float*>(array.data()) : nullptr,
                                    f32 ? array.size() : 0)));
}

}  // namespace reprise::python

#endif  // REPRISE_PYTHON_SRC_ARRAYS_H_
