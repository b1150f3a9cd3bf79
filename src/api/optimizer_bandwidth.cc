#include "src/api/optimizer_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// Times `body` (which enqueues on `stream`) between events, warmup + iters times, all queued back
// to back and waited for once at the end: the device never idles waiting for the host between
// runs, so the times are the device's.
template <typename Body>
absl::StatusOr<std::vector<float>> TimeEach(cudaStream_t stream, int warmup, int iters,
                                            const Body& body) {
  if (warmup < 0 || iters < 1) return absl::InvalidArgumentError("needs iters >= 1, warmup >= 0");
  std::vector<runtime::Event> marks;
  for (int i = 0; i <= warmup + iters; ++i) {
    ASSIGN_OR_RETURN(runtime::Event e, runtime::Event::Create(cudaEventDefault));
    marks.push_back(std::move(e));
  }
  for (int i = 0; i < warmup + iters; ++i) {
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaEventRecord(marks[i].get(), stream), "cudaEventRecord", "timing"));
    RETURN_IF_ERROR(body());
  }
  RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(marks.back().get(), stream),
                                      "cudaEventRecord", "timing"));
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "timing"));
  std::vector<float> ms;
  for (int i = warmup; i < warmup + iters; ++i) {
    ASSIGN_OR_RETURN(const float t, runtime::ElapsedMs(marks[i], marks[i + 1]));
    ms.push_back(t);
  }
  return ms;
}

}  // namespace

OptimizerTraffic OptimizerTrafficOf(const passes::Plan& plan) {
  const Graph& g = plan.graph();
  OptimizerTraffic traffic;
  for (const passes::ScheduledLaunch& launch : plan.launches) {
    const Node& node = g.node(launch.node);
    if (node.op->kind != ir::OpKind::kOptimizer) continue;
    traffic.nodes.push_back(node.name);
    for (const Value& v : node.inputs) {
      traffic.bytes_read = SaturatingAdd(traffic.bytes_read, g.spec(v).bytes());
    }
    for (const TensorSpec& out : node.outputs) {
      traffic.bytes_written = SaturatingAdd(traffic.bytes_written, out.bytes());
    }
    for (int i : ir::MutatedInputs(node)) {
      traffic.bytes_written = SaturatingAdd(traffic.bytes_written, g.spec(node.inputs[i]).bytes());
    }
  }
  traffic.parameters = g.NumParameterElements();
  return traffic;
}

absl::StatusOr<OptimizerTiming> TimeOptimizerUpdate(const Graph& graph, Value loss,
                                                    TrainOptions options, int warmup, int iters) {
  options.launch.mode = ExecMode::kBulked;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer::Impl> trainer,
                   Trainer::Impl::Create(graph, loss, options));
  for (int step = 0; step < 2; ++step) RETURN_IF_ERROR(trainer->Step());
  RETURN_IF_ERROR(trainer->Synchronize());
  OptimizerTiming timing;
  timing.traffic = OptimizerTrafficOf(trainer->plan());
  const absl::flat_hash_set<std::string> update(timing.traffic.nodes.begin(),
                                                timing.traffic.nodes.end());
  std::vector<const ops::GpuKernel*> kernels;
  for (const capture::LoweredLaunch& launch : trainer->launches()) {
    if (update.contains(launch.node_name)) kernels.push_back(launch.kernel.get());
  }
  if (kernels.empty()) {
    return absl::FailedPreconditionError(
        "the plan has no optimizer launch of its own (a whole-step kernel holds the update?)");
  }
  timing.nodes_per_update = static_cast<int64_t>(kernels.size());
  for (const ops::GpuKernel* kernel : kernels) {
    timing.launches_per_update +=
        std::max<int64_t>(1, static_cast<int64_t>(kernel->GeneratedKernelNames().size()));
  }
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  ASSIGN_OR_RETURN(timing.ms, TimeEach(stream.get(), warmup, iters, [&]() -> absl::Status {
                     for (const ops::GpuKernel* kernel : kernels) {
                       RETURN_IF_ERROR(kernel->Launch(stream.get()));
                     }
                     return absl::OkStatus();
                   }));
  return timing;
}

absl::StatusOr<std::vector<float>> TimeDeviceCopy(int64_t bytes, int warmup, int iters) {
  ASSIGN_OR_RETURN(runtime::DeviceBuffer from, runtime::DeviceBuffer::Create(bytes));
  ASSIGN_OR_RETURN(runtime::DeviceBuffer to, runtime::DeviceBuffer::Create(bytes));
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  RETURN_IF_ERROR(runtime::CudaStatus(cudaMemsetAsync(from.data(), 1, bytes, stream.get()),
                                      "cudaMemsetAsync", "copy source"));
  return TimeEach(stream.get(), warmup, iters, [&]() {
    return runtime::CudaStatus(
        cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()),
        "cudaMemcpyAsync", absl::StrCat("copy of ", bytes, " bytes"));
  });
}

}  // namespace reprise
