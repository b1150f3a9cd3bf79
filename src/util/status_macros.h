// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian's Abseil predates ABSL_RETURN_IF_ERROR, so we keep
// our own two macros. Both evaluate their expression exactly once.
#ifndef REPRISE_SRC_UTIL_STATUS_MACROS_H_
#define REPRISE_SRC_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define REPRISE_CONCAT_INNER(a, b) a##b
#define REPRISE_CONCAT(a, b) REPRISE_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                           \
  do {                                                                  \
    if (::absl::Status reprise_status = (expr); !reprise_status.ok()) { \
      return reprise_status;                                            \
    }                                                                   \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares x from an OK StatusOr, or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  REPRISE_ASSIGN_OR_RETURN_IMPL(REPRISE_CONCAT(reprise_statusor_, __LINE__), lhs, expr)
#define REPRISE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // REPRISE_SRC_UTIL_STATUS_MACROS_H_
