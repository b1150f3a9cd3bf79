// absl::Status -> Python exceptions, with the C++ message unchanged. The code picks the type:
//   InvalidArgument, OutOfRange, AlreadyExists -> ValueError    NotFound -> KeyError
//   FailedPrecondition, Aborted, Internal, Unknown, ... -> RuntimeError
//   Unimplemented -> NotImplementedError    ResourceExhausted -> MemoryError
//   DataLoss -> OSError    PermissionDenied -> PermissionError    DeadlineExceeded -> TimeoutError
#ifndef REPRISE_PYTHON_SRC_ERRORS_H_
#define REPRISE_PYTHON_SRC_ERRORS_H_

#include <nanobind/nanobind.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace reprise::python {

// The Python exception type of a non-OK code (see above).
PyObject* ExceptionTypeOf(absl::StatusCode code);

// Raises the Python exception of a non-OK status; returns for OK.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

void BindErrors(nanobind::module_& m);

}  // namespace reprise::python

#endif  // REPRISE_PYTHON_SRC_ERRORS_H_
