#include "tests/gpu/gpu_op_check.h"

#include <cmath>
#include <cstring>

#include "capture/executor.h"
#include "capture/lowered_step.h"
#include "gtest/gtest.h"
#include "src/ir/low_precision.h"
#include "src/ir/op_def.h"
#include "src/passes/memory_plan.h"
#include "src/passes/schedule.h"
#include "src/runtime/lane_workspaces.h"
#include "src/runtime/owners.h"

namespace reprise {

namespace {

void Check(const Graph& g, ir::ReferenceExecutor& cpu, double tolerance,
           const absl::flat_hash_set<Value>& unchecked, const ops::LoweringOptions& lowering,
           std::vector<std::string>* described) {
  auto schedule = passes::Schedule(g);
  ASSERT_TRUE(schedule.ok());
  std::vector<Value> everything;
  for (const Node& n : g.nodes()) {
    for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) {
      if (!unchecked.contains(Value{n.id, o})) everything.push_back({n.id, o});
    }
  }
  auto memory = passes::PlanMemory(g, absl::MakeSpan(*schedule), everything);
  ASSERT_TRUE(memory.ok());
  auto device = runtime::UseDevice(0);
  ASSERT_TRUE(device.ok());
  auto arena = runtime::DeviceBuffer::Create(memory->arena_bytes);
  auto workspace = runtime::DeviceBuffer::Create(64 << 20);
  // Zeroed, as a trainer's lanes' tickets are.
  constexpr int64_t kTicketWords = runtime::LaneWorkspaces::kTicketWords;
  auto tickets = runtime::DeviceBuffer::Create(kTicketWords * sizeof(unsigned));
  ASSERT_TRUE(tickets.ok());
  ASSERT_EQ(cudaMemset(tickets->data(), 0, tickets->bytes()), cudaSuccess);
  auto staging = runtime::PinnedBuffer::Create(std::max<int64_t>(1, memory->input_bytes));
  auto stream = runtime::Stream::Create();
  auto lt = runtime::LtHandle::Create();
  auto cudnn = runtime::CudnnHandle::Create();
  ASSERT_TRUE(arena.ok() && workspace.ok() && staging.ok() && stream.ok() && lt.ok() && cudnn.ok());
  runtime::KernelStore kernels(device->ArchFlag());
  char* base = static_cast<char*>(arena->data());
  for (const Node& n : g.nodes()) {  // Leaves: inputs into staging, the rest into the arena.
    if (!ir::IsLeaf(n)) continue;
    const passes::Buffer* b = memory->Find({n.id, 0});
    const void* host = (*cpu.Tensor({n.id, 0}))->raw();
    if (b->cls == passes::BufferClass::kInput) {
      std::memcpy(static_cast<char*>(staging->data()) + b->offset - memory->input_offset, host,
                  b->bytes);
    } else {
      ASSERT_EQ(cudaMemcpy(base + b->offset, host, b->bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  passes::Plan plan;
  plan.training.graph = g;
  plan.launches = *schedule;
  plan.memory = *memory;
  capture::StepResources res{.device = &*device,
                             .kernels = &kernels,
                             .lt = &*lt,
                             .cudnn = &*cudnn,
                             .arena = base,
                             .workspace = workspace->data(),
                             .workspace_bytes = workspace->bytes(),
                             .input_staging = staging->data(),
                             .lowering = lowering,
                             .lane_tickets = {static_cast<unsigned*>(tickets->data())},
                             .ticket_words = kTicketWords};
  auto launches = capture::LowerPlan(plan, res);
  ASSERT_TRUE(launches.ok()) << launches.status();
  if (described != nullptr) {
    for (const capture::LoweredLaunch& launch : launches->launches) {
      described->push_back(launch.kernel->Describe());
    }
  }
  const absl::Status ran = capture::RunEager(launches->launches, stream->get(), /*sync_each=*/true);
  ASSERT_TRUE(ran.ok()) << ran;
  ASSERT_TRUE(cpu.Run().ok());
  for (const Node& n : g.nodes()) {
    std::vector<Value> checked;
    if (!ir::IsLeaf(n)) {
      for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o) checked.push_back({n.id, o});
      for (int m : ir::MutatedInputs(n)) checked.push_back(n.inputs[m]);
    }
    for (const Value& v : checked) {
      if (unchecked.contains(v)) continue;
      const passes::Buffer* b = memory->Find(v);
      const ir::HostTensor* want = *cpu.Tensor(v);
      ir::HostTensor got(want->spec());
      ASSERT_EQ(cudaMemcpy(got.raw(), base + b->offset, b->bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      double err = 0, norm = 0;
      for (int64_t i = 0; i < want->size(); ++i) {
        // Any element type: 16-bit floats and int32 compare as their values.
        const double g = ir::FloatElement(got, i), w = ir::FloatElement(*want, i);
        err += (g - w) * (g - w);
        norm += w * w;
        ASSERT_FALSE(std::isnan(g)) << n.name << "[" << i << "]";
      }
      std::string kernel;  // What ran, to name a library algorithm that is off.
      for (const capture::LoweredLaunch& launch : launches->launches) {
        if (launch.node_name == n.name) kernel = launch.kernel->Describe();
      }
      EXPECT_LE(std::sqrt(err / std::max(norm, 1e-30)), tolerance) << n.name << ": " << kernel;
    }
  }
}

}  // namespace

void ExpectGpuMatchesCpu(const Graph& g, ir::ReferenceExecutor& cpu, double tolerance,
                         const absl::flat_hash_set<Value>& unchecked, bool deterministic,
                         bool allow_tf32, std::vector<std::string>* described,
                         bool graph_conv_api) {
  // Every lowering we have, our own weight gradients too.
  const ops::LoweringOptions lowering{.allow_tf32 = allow_tf32,
                                      .deterministic = deterministic,
                                      .own_weight_gradients = true,
                                      .conv_api = graph_conv_api
                                                      ? ops::LoweringOptions::ConvApi::kGraph
                                                      : ops::LoweringOptions::ConvApi::kLegacy,
                                      .batch_norm_finalize_in_stats = true};
  Check(g, cpu, tolerance, unchecked, lowering, described);
}

void ExpectGpuMatchesCpuLowered(const Graph& g, ir::ReferenceExecutor& cpu, double tolerance,
                                const ops::LoweringOptions& lowering,
                                std::vector<std::string>* described) {
  Check(g, cpu, tolerance, {}, lowering, described);
}

}  // namespace reprise
