#include "python/src/errors.h"

#include <nanobind/stl/string.h>

#include <string>

namespace nb = nanobind;

namespace reprise::python {

PyObject* ExceptionTypeOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return PyExc_ValueError;
    case absl::StatusCode::kNotFound:
      return PyExc_KeyError;
    case absl::StatusCode::kUnimplemented:
      return PyExc_NotImplementedError;
    case absl::StatusCode::kResourceExhausted:
      return PyExc_MemoryError;
    case absl::StatusCode::kDataLoss:
      return PyExc_OSError;
    case absl::StatusCode::kPermissionDenied:
      return PyExc_PermissionError;
    case absl::StatusCode::kDeadlineExceeded:
      return PyExc_TimeoutError;
    default:  // FailedPrecondition, Aborted, Internal, Unknown, Unavailable, Cancelled, ...
      return PyExc_RuntimeError;
  }
}

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  PyErr_SetString(ExceptionTypeOf(status.code()), message.c_str());
  throw nb::python_error();
}

void BindErrors(nb::module_& m) {
  // For tests and callers that want the mapping: the exception type of a status code name.
  m.def(
      "_exception_type_of",
      [](int code) {
        return nb::borrow<nb::object>(ExceptionTypeOf(static_cast<absl::StatusCode>(code)));
      },
      nb::arg("code"));
  // Raises the exception a status of `code` with `message` becomes, as every binding does.
  m.def(
      "_raise_status",
      [](int code, const std::string& message) {
        ThrowIfError(absl::Status(static_cast<absl::StatusCode>(code), message));
      },
      nb::arg("code"), nb::arg("message"));
}

}  // namespace reprise::python
