// Gradient buckets for data parallelism: the parameters' gradients grouped, in the order the
// backward pass makes them, into buckets of about a given size, each averaged over the ranks by one
// all_reduce node (src/ops/all_reduce.h) as soon as its last gradient is made. The all-reduces go
// between the backward pass and the optimizer, so every optimizer node (updates, the gradient norm,
// loss scaling's check) reads averaged gradients while the backward pass keeps its own; the
// schedule runs each all-reduce on the communication lane right after the launch that makes the
// bucket's last gradient, and each update after its bucket's all-reduce (src/passes/schedule.h).
#ifndef REPRISE_SRC_PASSES_GRADIENT_BUCKETS_H_
#define REPRISE_SRC_PASSES_GRADIENT_BUCKETS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/autodiff/autodiff.h"

namespace reprise::passes {

struct GradientBucket {
  // The values averaged, distinct and of one float type, in the order the backward schedule makes
  // them: a parameter's gradient (a value that is the gradient of several parameters appears
  // once) or, where mixed precision widens a 16-bit gradient to float32 for the optimizer by a
  // cast read by nothing else, the 16-bit gradient, so that half the bytes travel; that cast then
  // runs after the all-reduce.
  std::vector<Value> gradients;
  std::vector<int32_t> widen;     // Per value: the cast node that widens it afterwards, or -1.
  std::vector<TensorSpec> specs;  // Per value.
  std::vector<std::string> parameters;  // Their parameters' names, in the same order.
  DType dtype = DType::kFloat32;
  int64_t bytes = 0;  // The gradients' bytes, padding not counted.
  int ready = -1;     // The launch (in the backward schedule) that makes the last gradient.
};

// Buckets the gradients of `t` (as autodiff built it): in the order of the launches that make them
// in the one-lane schedule (the last layer's first), each type's gradients fill a bucket until it
// holds at least `bucket_bytes`; the buckets come in the order they become ready. InvalidArgument
// for bucket_bytes < 1.
absl::StatusOr<std::vector<GradientBucket>> AssignGradientBuckets(const autodiff::TrainingGraph& t,
                                                                  int64_t bucket_bytes);

// `t` with one all_reduce node per bucket ("grad_allreduce.<i>") before its first optimizer node,
// the optimizer nodes reading the averaged gradients, and t.gradients naming them. Every other node
// keeps its id (the forward's included) and its inputs. InvalidArgument when a bucket holds a value
// that is no gradient of `t`, or a gradient is in no bucket.
absl::StatusOr<autodiff::TrainingGraph> AverageGradients(const autodiff::TrainingGraph& t,
                                                         absl::Span<const GradientBucket> buckets);

// One line per bucket ("bucket 0: f32 1049600 bytes after launch 12: fc3.weight f32[10, 64], ..."):
// what ranks compare to check that they run the same collectives on the same layouts.
std::string BucketsToString(absl::Span<const GradientBucket> buckets);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_GRADIENT_BUCKETS_H_
