// Shape buckets: one model planned at several input shapes (batch sizes), all laid out in one
// arena. Only one bucket's step runs at a time (the buckets share a stream), so the arena holds
//   shared    the parameters and state (optimizer moments, batch-norm statistics, the step
//             counter), which every bucket has under the same names and specs, at one place
//             that every bucket reads and updates: the buckets continue one training run;
//   private   each bucket's other persistent tensors (constants, the loss and fetched values, a
//             fused kernel's own state), apart from everything else;
//   overlap   each bucket's inputs and transient tensors, which a step writes before it reads
//             them, all from one offset: as large as the largest bucket's alone.
// So three buckets need little more than the largest bucket alone.
#ifndef REPRISE_SRC_PASSES_BUCKET_PLAN_H_
#define REPRISE_SRC_PASSES_BUCKET_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/passes/memory_plan.h"

namespace reprise::passes {

// One bucket's plan, as PlaceBuckets reads and moves it.
struct BucketPlan {
  std::string label;  // Names the bucket in errors: "batch 64".
  const Graph* graph = nullptr;
  MemoryPlan* memory = nullptr;  // Moved in place.
  // The parameters and state this bucket shares with the others, by leaf name.
  std::vector<std::string> shared;
};

struct BucketArena {
  int64_t arena_bytes = 0;
  int64_t shared_bytes = 0;                       // [0, shared_bytes): the shared tensors.
  int64_t private_bytes = 0;                      // Then every bucket's private tensors.
  int64_t overlap_offset = 0, overlap_bytes = 0;  // Then the overlapped inputs and transients.
  int64_t largest_alone_bytes = 0;                // The largest bucket's own arena_bytes.
};

// Moves every buffer of every bucket's memory plan to its place in one arena (above); each plan's
// arena_bytes becomes the shared arena's, its input and transient offsets move with them, and its
// liveness is kept. InvalidArgument when the buckets' shared tensors differ: a name one bucket
// shares and another lacks or does not share, or a spec that differs (both named, with the
// buckets' labels); when a shared name is no parameter or state; or with no buckets.
absl::StatusOr<BucketArena> PlaceBuckets(absl::Span<const BucketPlan> buckets);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_BUCKET_PLAN_H_
