// REPRISE_RETURN_IF_ERROR / REPRISE_ASSIGN_OR_RETURN: early returns on absl::Status and
// absl::StatusOr for code that calls reprise. Abseil has ABSL_ versions only in releases newer than
// Debian's, so reprise carries its own under its own prefix. Both evaluate their expression
// exactly once.
#ifndef REPRISE_INCLUDE_REPRISE_STATUS_MACROS_H_
#define REPRISE_INCLUDE_REPRISE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define REPRISE_STATUS_CONCAT_INNER_(a, b) a##b
#define REPRISE_STATUS_CONCAT_(a, b) REPRISE_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` (an absl::Status) from the enclosing function when it is not OK.
#define REPRISE_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    if (::absl::Status reprise_status = (expr); !reprise_status.ok()) { \
      return reprise_status;                                            \
    }                                                                   \
  } while (false)

// `REPRISE_ASSIGN_OR_RETURN(auto x, Foo());` declares x from an OK absl::StatusOr, or returns its
// status. `lhs` may also be an existing variable. It expands to several statements: do not use it
// as the single statement of an unbraced `if`.
#define REPRISE_ASSIGN_OR_RETURN(lhs, expr) \
  REPRISE_ASSIGN_OR_RETURN_IMPL_(REPRISE_STATUS_CONCAT_(reprise_statusor_, __LINE__), lhs, expr)
#define REPRISE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // REPRISE_INCLUDE_REPRISE_STATUS_MACROS_H_
