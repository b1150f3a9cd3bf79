// What the graph-builder fuzzer (graph_builder_fuzzer.cc) draws from its bytes: extents, shapes,
// dtypes, initialisers, ops of the engine's table with random attributes, and the values of a
// small graph's inputs for the CPU reference.
#ifndef REPRISE_TESTS_FUZZ_GRAPH_FUZZ_OPS_H_
#define REPRISE_TESTS_FUZZ_GRAPH_FUZZ_OPS_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>

#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"

namespace reprise::fuzz {

// Aborts the run (a finding) when a property does not hold.
inline void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Extents that are small, zero, negative, at a boundary, or large enough to wrap a product.
int64_t Extent(FuzzedDataProvider& in);
Shape RandomShape(FuzzedDataProvider& in);
DType RandomDType(FuzzedDataProvider& in);
Layout RandomLayout(FuzzedDataProvider& in);
// Finite, non-finite or extreme.
double RandomDouble(FuzzedDataProvider& in);
Initializer RandomInitializer(FuzzedDataProvider& in);

// An op of ops::AllOps() and attributes named as the ops' own, with values of any kind.
const ir::OpDef& RandomOp(FuzzedDataProvider& in);
Attrs RandomAttrs(FuzzedDataProvider& in);

// Whether every tensor of `graph` is small enough for the CPU reference to run it in a few
// milliseconds.
bool IsSmall(const Graph& graph);

// Sets every input leaf of `graph` in `executor`: floats that may be NaN or infinite, int32 values
// (labels, token ids) in or out of range.
void FillInputs(FuzzedDataProvider& in, const Graph& graph, ir::ReferenceExecutor& executor);

}  // namespace reprise::fuzz

#endif  // REPRISE_TESTS_FUZZ_GRAPH_FUZZ_OPS_H_
