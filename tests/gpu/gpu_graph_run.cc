#include "tests/gpu/gpu_graph_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "capture/executor.h"
#include "capture/lowered_step.h"
#include "src/ir/low_precision.h"
#include "src/ir/op_def.h"
#include "src/passes/memory_plan.h"
#include "src/passes/schedule.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::StatusOr<std::vector<ir::HostTensor>> RunOnGpu(const Graph& g, ir::ReferenceExecutor& leaves,
                                                     absl::Span<const Value> fetch,
                                                     bool deterministic) {
  ASSIGN_OR_RETURN(std::vector<passes::ScheduledLaunch> schedule, passes::Schedule(g));
  // Every value stays alive to the end, so any of them can be fetched, bar a value a node writes
  // its output over (OpDef::output_overwrites_input) and that output: the memory plan shares a
  // place only between values it may treat as transient.
  absl::flat_hash_set<Value> shared;
  for (const Node& n : g.nodes()) {
    if (n.op != nullptr && n.op->output_overwrites_input >= 0) {
      shared.insert(n.inputs.at(n.op->output_overwrites_input));
      shared.insert(Value{n.id, 0});
    }
  }
  std::vector<Value> everything;
  for (const Node& n : g.nodes()) {
    for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) {
      if (!shared.contains(Value{n.id, o})) everything.push_back({n.id, o});
    }
  }
  for (const Value& v : fetch) {
    if (shared.contains(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", g.node(v.node).name,
                       "' shares its place with a value written over: fetch a value read from it"));
    }
  }
  ASSIGN_OR_RETURN(passes::MemoryPlan memory,
                   passes::PlanMemory(g, absl::MakeSpan(schedule), everything));
  ASSIGN_OR_RETURN(runtime::DeviceInfo device, runtime::UseDevice(0));
  ASSIGN_OR_RETURN(runtime::DeviceBuffer arena, runtime::DeviceBuffer::Create(memory.arena_bytes));
  ASSIGN_OR_RETURN(runtime::DeviceBuffer workspace, runtime::DeviceBuffer::Create(64 << 20));
  ASSIGN_OR_RETURN(runtime::PinnedBuffer staging,
                   runtime::PinnedBuffer::Create(std::max<int64_t>(1, memory.input_bytes)));
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  ASSIGN_OR_RETURN(runtime::LtHandle lt, runtime::LtHandle::Create());
  ASSIGN_OR_RETURN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  runtime::KernelStore kernels(device.ArchFlag());
  char* base = static_cast<char*>(arena.data());
  for (const Node& n : g.nodes()) {  // Leaves: inputs into staging, the rest into the arena.
    if (!ir::IsLeaf(n)) continue;
    const passes::Buffer* b = memory.Find({n.id, 0});
    ASSIGN_OR_RETURN(ir::HostTensor * host, leaves.Tensor({n.id, 0}));
    if (b->cls == passes::BufferClass::kInput) {
      std::memcpy(static_cast<char*>(staging.data()) + b->offset - memory.input_offset, host->raw(),
                  b->bytes);
    } else {
      RETURN_IF_ERROR(runtime::CudaStatus(
          cudaMemcpy(base + b->offset, host->raw(), b->bytes, cudaMemcpyHostToDevice), "cudaMemcpy",
          n.name));
    }
  }
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                                      "cudaStreamSynchronize", "the leaves' uploads"));
  passes::Plan plan;
  plan.training.graph = g;
  plan.launches = schedule;
  plan.memory = memory;
  const capture::StepResources res{.device = &device,
                                   .kernels = &kernels,
                                   .lt = &lt,
                                   .cudnn = &cudnn,
                                   .arena = base,
                                   .workspace = workspace.data(),
                                   .workspace_bytes = workspace.bytes(),
                                   .input_staging = staging.data(),
                                   .lowering = {.deterministic = deterministic}};
  ASSIGN_OR_RETURN(capture::LoweredStep lowered, capture::LowerPlan(plan, res));
  RETURN_IF_ERROR(capture::RunEager(lowered.launches, stream.get(), /*sync_each=*/true));
  std::vector<ir::HostTensor> fetched;
  for (const Value& v : fetch) {
    const passes::Buffer* b = memory.Find(v);
    if (b == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("value ", v.node, ":", v.output, " has no buffer in the graph's plan"));
    }
    ir::HostTensor& t = fetched.emplace_back(g.spec(v));
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaMemcpy(t.raw(), base + b->offset, b->bytes, cudaMemcpyDeviceToHost),
                            "cudaMemcpy", g.node(v.node).name));
  }
  return fetched;
}

double RelativeL2(const ir::HostTensor& a, const ir::HostTensor& b) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    const double x = ir::FloatElement(a, i), y = ir::FloatElement(b, i);
    err += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

}  // namespace reprise
