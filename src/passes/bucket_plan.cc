#include "src/passes/bucket_plan.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace reprise::passes {
namespace {

int64_t AlignUp(int64_t x) {
  return (x + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

bool Persistent(const Buffer& b) {
  return b.cls != BufferClass::kInput && b.cls != BufferClass::kActivation;
}

// The bucket's shared tensors by name -> their buffers' positions in its plan.
absl::StatusOr<absl::flat_hash_map<std::string, int>> SharedBuffers(const BucketPlan& bucket) {
  absl::flat_hash_map<std::string, int> found;
  for (const std::string& name : bucket.shared) {
    absl::StatusOr<int32_t> node = bucket.graph->FindNode(name);
    const Buffer* b = node.ok() ? bucket.memory->Find({*node, 0}) : nullptr;
    if (b == nullptr ||
        (b->cls != BufferClass::kParameter && b->cls != BufferClass::kOptimizerState)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' of ", bucket.label, " is no parameter or state, so it cannot be shared"));
    }
    found[name] = bucket.memory->index.at({*node, 0});
  }
  return found;
}

}  // namespace

absl::StatusOr<BucketArena> PlaceBuckets(absl::Span<const BucketPlan> buckets) {
  if (buckets.empty()) return absl::InvalidArgumentError("no buckets to place");
  std::vector<absl::flat_hash_map<std::string, int>> shared;
  for (const BucketPlan& bucket : buckets) {
    absl::StatusOr<absl::flat_hash_map<std::string, int>> found = SharedBuffers(bucket);
    if (!found.ok()) return found.status();
    shared.push_back(*std::move(found));
  }
  // Every bucket shares the same tensors, with the same specs.
  const BucketPlan& first = buckets[0];
  for (size_t k = 1; k < buckets.size(); ++k) {
    for (const auto& [a, b, a_shared, b_shared] :
         {std::tuple(&first, &buckets[k], &shared[0], &shared[k]),
          std::tuple(&buckets[k], &first, &shared[k], &shared[0])}) {
      for (const std::string& name : a->shared) {  // In order, so errors name the first.
        const int index = a_shared->at(name);
        auto other = b_shared->find(name);
        if (other == b_shared->end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("parameter or state '", name, "' is in ", a->label, " but not in ",
                           b->label, ": every bucket must have the same parameters and state"));
        }
        const TensorSpec& spec_a = a->graph->spec(a->memory->buffers[index].value);
        const TensorSpec& spec_b = b->graph->spec(b->memory->buffers[other->second].value);
        if (spec_a != spec_b) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter or state '", name, "' is ", spec_a.ToString(), " in ", a->label, " but ",
              spec_b.ToString(), " in ", b->label,
              ": buckets share their parameters and state, so each must be the same in every "
              "bucket (only inputs and activations may change shape)"));
        }
      }
    }
  }

  BucketArena arena;
  // Shared tensors in the first bucket's order (parameters, then state).
  std::vector<int> order;
  for (const auto& [name, index] : shared[0]) order.push_back(index);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return first.memory->buffers[a].offset < first.memory->buffers[b].offset;
  });
  absl::flat_hash_map<std::string, int64_t> shared_offset;
  int64_t cursor = 0;
  for (int index : order) {
    const Buffer& b = first.memory->buffers[index];
    shared_offset[first.graph->node(b.value.node).name] = cursor;
    cursor += AlignUp(b.bytes);
  }
  arena.shared_bytes = cursor;
  for (size_t k = 0; k < buckets.size(); ++k) {
    MemoryPlan& memory = *buckets[k].memory;
    std::vector<int> own;
    for (int i = 0; i < static_cast<int>(memory.buffers.size()); ++i) {
      Buffer& b = memory.buffers[i];
      if (!Persistent(b)) continue;
      auto it = shared_offset.find(buckets[k].graph->node(b.value.node).name);
      if (it != shared_offset.end() && shared[k].contains(it->first)) {
        b.offset = it->second;
      } else {
        own.push_back(i);
      }
    }
    std::sort(own.begin(), own.end(),
              [&](int a, int b) { return memory.buffers[a].offset < memory.buffers[b].offset; });
    for (int i : own) {
      memory.buffers[i].offset = cursor;
      cursor += AlignUp(memory.buffers[i].bytes);
    }
  }
  arena.private_bytes = cursor - arena.shared_bytes;
  arena.overlap_offset = cursor;
  for (const BucketPlan& bucket : buckets) {
    MemoryPlan& memory = *bucket.memory;
    arena.largest_alone_bytes = std::max(arena.largest_alone_bytes, memory.arena_bytes);
    // Inputs and transients keep their places relative to each other.
    arena.overlap_bytes = std::max(arena.overlap_bytes, memory.arena_bytes - memory.input_offset);
    const int64_t shift = arena.overlap_offset - memory.input_offset;
    for (Buffer& b : memory.buffers) {
      if (!Persistent(b)) b.offset += shift;
    }
    memory.input_offset += shift;
    memory.transient_offset += shift;
  }
  arena.arena_bytes = arena.overlap_offset + arena.overlap_bytes;
  for (const BucketPlan& bucket : buckets) bucket.memory->arena_bytes = arena.arena_bytes;
  return arena;
}

}  // namespace reprise::passes
