// Graphviz: renders DOT text to SVG by running the `dot` program when it is installed. Graphviz is
// an optional tool, not a library we link, so every dump works without it except SVG.
//
//   RETURN_IF_ERROR(CheckDotAvailable());  // Before the expensive work, so the user hears at once.
//   ASSIGN_OR_RETURN(std::string svg, RenderSvg(dot_text));
#ifndef REPRISE_SRC_UTIL_GRAPHVIZ_H_
#define REPRISE_SRC_UTIL_GRAPHVIZ_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::util {

// The path of the first executable `dot` on PATH; empty when there is none.
std::string FindDotProgram();

// OK when `dot` is on PATH; otherwise FailedPrecondition
// "Graphviz 'dot' not found on PATH; use --format dot".
absl::Status CheckDotAvailable();

// Runs `dot -Tsvg` with `dot_text` on its standard input and returns what it writes. Errors:
// FailedPrecondition without `dot` (as CheckDotAvailable); Internal when it cannot be started or
// rejects the input, with dot's own message.
absl::StatusOr<std::string> RenderSvg(absl::string_view dot_text);

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_GRAPHVIZ_H_
