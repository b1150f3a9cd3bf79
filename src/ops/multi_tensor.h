// What the multi-tensor optimizer ops share: their input layout (k inputs per tensor, then the
// inputs every tensor shares), the inputs they write, the tables of the chunked kernels, and a
// GpuKernel that runs one launch per table of tensors.
#ifndef REPRISE_SRC_OPS_MULTI_TENSOR_H_
#define REPRISE_SRC_OPS_MULTI_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/codegen/generated_kernel.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// Inputs: per_tensor for each of attrs["tensors"] tensors, then shared inputs, whose count must
// lie in [min_shared, max_shared]. Returns the tensor count.
absl::StatusOr<int64_t> MultiTensorCount(const Attrs& attrs, int num_inputs, int per_tensor,
                                         int min_shared, int max_shared);

// The inputs of tensor t followed by the shared ones: what the single-tensor op sees.
template <typename T>
std::vector<T> SingleTensorInputs(absl::Span<T const> in, int64_t tensors, int per_tensor,
                                  int64_t t) {
  std::vector<T> single(in.begin() + per_tensor * t, in.begin() + per_tensor * (t + 1));
  single.insert(single.end(), in.begin() + per_tensor * tensors, in.end());
  return single;
}

// The optional shared inputs of an optimizer update, after its `min_shared` fixed ones: the global
// clip coefficient, then (attr loss_scaled) loss scaling's check f32[2] = [1 / scale, found
// non-finite] (src/codegen/loss_scale_kernels.h). Indices count from the first shared input; -1
// where absent. InvalidArgument, counting `per_tensor` inputs before the shared ones, unless
// `num_shared` leaves room for exactly these.
struct OptionalShared {
  int clip = -1;
  int check = -1;
};
absl::StatusOr<OptionalShared> OptionalSharedInputs(const Attrs& attrs, int per_tensor,
                                                    int num_shared, int min_shared);
// InvalidArgument unless `check` is loss scaling's f32[2].
absl::Status CheckLossScaleCheck(const TensorSpec& check);

// The single-tensor op's shape rule (or reference) applied to each tensor's inputs in turn, with
// the multi-tensor node's attributes; errors name the tensor. The multi-tensor op has no outputs.
absl::StatusOr<std::vector<TensorSpec>> InferEachTensor(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in,
                                                        int64_t tensors, int per_tensor,
                                                        ir::InferFn single);
absl::Status RunEachTensor(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out, int64_t tensors, int per_tensor,
                           ir::CpuFn single);

// The written inputs of every tensor: `per_tensor_mutated` (offsets within a tensor's inputs)
// for each of attrs["tensors"] tensors (none when the attribute is missing).
std::vector<int> MultiTensorMutated(const Attrs& attrs, int per_tensor,
                                    absl::Span<const int> per_tensor_mutated);

// An update's 16-bit working copies (attr copies = K, src/passes/parameter_copies.h): tensor
// t < K has its copy at input first_copy + t, its weight at input per_tensor * t, and the int32
// stale flag follows the last copy. InvalidArgument naming the tensor unless each copy is a
// 16-bit float of its weight's shape, or for a bad flag.
absl::Status CheckWeightCopies(absl::Span<const TensorSpec> in, int per_tensor, int64_t copies,
                               int64_t first_copy);
// `mutated` and, with attr copies = K > 0, the last K + 1 inputs (the copies and the flag).
std::vector<int> WithCopiesMutated(std::vector<int> mutated, const Attrs& attrs, int num_inputs);
// The reference's copies after the update: each new weight rounded into its copy (the reference
// executor rounds the widened copy as the cast does), unless the step was `skipped`; the flag
// cleared either way.
absl::Status WriteWeightCopies(absl::Span<ir::HostTensor* const> in, int per_tensor, int64_t copies,
                               int64_t first_copy, bool skipped);

// The by-value table of a chunked multi-tensor kernel (src/codegen/optimizer_kernels.h) for up to
// `capacity` tensors: `pointer_arrays` arrays of pointers (one per array of each tensor), then
// long long n[capacity] and int first[capacity + 1] (each tensor's first chunk of
// codegen::kNormChunk elements, then the chunk count), laid out as the kernel's struct declares
// them.
class ChunkTable {
 public:
  ChunkTable(int capacity, int pointer_arrays);
  // Appends a tensor of `n` elements with one pointer per array. InvalidArgument when the table
  // is full or the chunks no longer fit an int.
  absl::Status Add(absl::Span<void* const> pointers, int64_t n);
  int count() const { return count_; }
  int64_t chunks() const { return chunks_; }
  const void* data() const { return words_.data(); }
  size_t bytes() const { return words_.size() * sizeof(uint64_t); }

 private:
  int capacity_, pointer_arrays_, count_ = 0;
  int64_t chunks_ = 0;
  std::vector<uint64_t> words_;
};

// The table of tensors [first, first + count) of a multi-tensor update lowered onto a chunked
// kernel (adam_multi, sgd_multi), at the capacity MultiTensorCapacity(count) picks, and their
// GradKinds bytes: each tensor's `per_tensor` inputs (its weight first, its gradient second) as its
// pointers, then, where `copies` > 0, its 16-bit copy's (input first_copy + t, or null for
// t >= copies) with the copy's type in the kind's bits 2-3.
struct UpdateTable {
  ChunkTable table;
  std::vector<unsigned char> kinds;
};
absl::StatusOr<UpdateTable> UpdateTableOf(const LoweringContext& ctx, int per_tensor, int64_t first,
                                          int64_t count, int64_t copies, int64_t first_copy);
// The grid of such an update's launch over `chunks` chunks: one wave of codegen::kAdamBlocksPerSm
// blocks a multiprocessor at most, striding over the chunks, and at least one block.
dim3 UpdateGrid(const LoweringContext& ctx, int64_t chunks);

// Chunks of codegen::kNormChunk elements in a tensor of n.
int64_t NormChunks(int64_t n);

// The chunked kernels that lowering `node` (adam_multi, sgd_multi, grad_sum_squares[_nonfinite],
// grad_nonfinite or cast_multi) compiles, one per table capacity of its launches; none for other
// nodes. For prefetching at Trainer creation.
std::vector<codegen::GeneratedKernel> ChunkedKernelsOf(const Node& node);

// Runs its parts one after another: one launch per table of tensors; described as the parts'
// descriptions joined by "; ".
class LaunchSequence : public KernelSequence {
 public:
  using KernelSequence::KernelSequence;
  std::string Describe() const override;
};

// One part as is, several as a LaunchSequence.
std::unique_ptr<GpuKernel> Sequence(std::vector<std::unique_ptr<GpuKernel>> parts);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MULTI_TENSOR_H_
