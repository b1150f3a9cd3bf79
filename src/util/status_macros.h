// RETURN_IF_ERROR / ASSIGN_OR_RETURN: the library's own short spellings of the public
// REPRISE_RETURN_IF_ERROR / REPRISE_ASSIGN_OR_RETURN (reprise/status_macros.h), which they expand
// to: one implementation. Not installed, so a user's own macros of these names never collide.
#ifndef REPRISE_SRC_UTIL_STATUS_MACROS_H_
#define REPRISE_SRC_UTIL_STATUS_MACROS_H_

#include "reprise/status_macros.h"

#define REPRISE_CONCAT(a, b) REPRISE_STATUS_CONCAT_(a, b)

#define RETURN_IF_ERROR(expr) REPRISE_RETURN_IF_ERROR(expr)
#define ASSIGN_OR_RETURN(lhs, expr) REPRISE_ASSIGN_OR_RETURN(lhs, expr)

#endif  // REPRISE_SRC_UTIL_STATUS_MACROS_H_
