// Where the optimizer's readers of a gradient other than the update (the global norm, the
// non-finite checks) find it under mixed precision.
#ifndef REPRISE_SRC_AUTODIFF_GRADIENT_AS_COMPUTED_H_
#define REPRISE_SRC_AUTODIFF_GRADIENT_AS_COMPUTED_H_

#include "reprise/graph.h"

namespace reprise::autodiff {

// For a parameter's gradient `gradient`: under mixed precision, the 16-bit gradient that its
// widening cast to float32 reads (finite exactly when its cast is, and widened exactly by the
// kernels that read it), so that the cast stays the update's alone and the multi-tensor update
// folds it in (one launch and one float32 pass less); else `gradient` itself.
Value GradientAsComputed(const Graph& g, Value gradient);

}  // namespace reprise::autodiff

#endif  // REPRISE_SRC_AUTODIFF_GRADIENT_AS_COMPUTED_H_
