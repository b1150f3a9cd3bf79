// Memory plan: one arena for the whole step. Persistent tensors (parameters, optimizer state,
// constants, fetched values) get fixed places; the step's inputs sit together so one copy per
// step fills them; every other tensor gets an offset by liveness, reusing the space of tensors
// that are dead (first fit, by first use or largest first, whichever peaks lower). No two tensors
// that are alive at the same time overlap. A communication op's inputs, and its outputs, are each
// placed as one block in node order (alignment padding between them), so one collective covers a
// whole bucket of gradients.
#ifndef REPRISE_SRC_PASSES_MEMORY_PLAN_H_
#define REPRISE_SRC_PASSES_MEMORY_PLAN_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/passes/schedule.h"

namespace reprise::passes {

inline constexpr int64_t kBufferAlignment = 256;  // cuBLASLt and vector loads like 256-byte bases.

enum class BufferClass : uint8_t {
  kParameter,
  kOptimizerState,
  // The parameters' 16-bit working copies that the update keeps (src/passes/parameter_copies.h).
  kParameterCopy,
  kConstant,
  kFetched,  // Kept after the step for the user to read (the loss, fetched values).
  kInput,
  kActivation,  // Transient: placed by liveness.
};
absl::string_view BufferClassName(BufferClass c);

struct Buffer {
  Value value;
  BufferClass cls;
  int64_t offset = 0;  // In the arena.
  int64_t bytes = 0;
  int first = 0, last = 0;  // Live from launch `first` to launch `last` (persistent: all).
  std::vector<int> uses;    // Transient: the launches that write or read it.
  // The buffer (index in MemoryPlan::buffers) this one is written over, sharing its place: the
  // output of an op that accumulates into an input (OpDef::output_overwrites_input); -1: none.
  int overwrites = -1;
};

struct MemoryPlan {
  std::vector<Buffer> buffers;
  absl::flat_hash_map<Value, int> index;  // Value -> position in `buffers`.
  int64_t arena_bytes = 0;
  int64_t input_offset = 0, input_bytes = 0;         // The contiguous input region.
  int64_t transient_offset = 0, transient_peak = 0;  // The liveness-planned region.
  absl::flat_hash_map<BufferClass, int64_t> bytes_by_class;
  // Waits the plan added to the schedule so that a buffer could take the place of one that
  // another lane read (see PlanMemory).
  int reuse_waits = 0;

  const Buffer* Find(Value v) const;
  // Whether `a` and `b` share one place because one is written over the other (directly or
  // through others: Buffer::overwrites). Two such buffers overlap although both are alive at the
  // launch that writes over.
  bool SharePlace(const Buffer& a, const Buffer& b) const;
};

// Plans every output of every node in `graph` for the launch order `schedule`. An output written
// over an input (OpDef::output_overwrites_input) shares that input's place; InvalidArgument, naming
// the node, when that input is not transient or a launch may still read it afterwards. `kept`
// values stay readable after the step. With several lanes, a transient buffer's space is reused
// only by a buffer whose producer runs after every use of it in every run (HappensBefore), so two
// launches that may run at the same time never share memory. Where a value's last reader on
// another compute lane is scheduled well before a producer (at least 8 launches), the plan may
// make that producer wait for the reader (a new entry in its `waits`) and reuse the space: without
// such waits, the weight gradients' lane would keep every activation it reads from being reused
// by the data-gradient lane (ResNet-50 b64, two or three lanes: 543 MiB more than one lane). It
// does so only where the buffer would not fit below the peak so far without that space, since the
// weight-gradient lane often runs behind. `reuse_waits` counts them; the communication lane neither
// waits nor is waited for this way.
absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, absl::Span<ScheduledLaunch> schedule,
                                      absl::Span<const Value> kept);

// The most transient bytes (each aligned as placed) alive at any launch of `schedule`: a lower
// bound on PlanMemory's transient_peak, found without placing anything (linear time).
absl::StatusOr<int64_t> LiveTransientBytes(const Graph& graph,
                                           absl::Span<const ScheduledLaunch> schedule,
                                           absl::Span<const Value> kept);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_MEMORY_PLAN_H_
