#include "tests/gpu/node_timing.h"

#include <memory>
#include <utility>
#include <vector>

#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::StatusOr<double> TimeNodeMs(const Graph& g, absl::string_view name, int repeats) {
  ASSIGN_OR_RETURN(const int32_t id, g.FindNode(name));
  const Node& node = g.node(id);
  ASSIGN_OR_RETURN(runtime::DeviceInfo device, runtime::UseDevice(0));
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  ASSIGN_OR_RETURN(runtime::LtHandle lt, runtime::LtHandle::Create());
  ASSIGN_OR_RETURN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  ASSIGN_OR_RETURN(runtime::DeviceBuffer workspace, runtime::DeviceBuffer::Create(64 << 20));
  runtime::KernelStore kernels(device.ArchFlag());
  std::vector<runtime::DeviceBuffer> buffers;
  ops::LoweringContext ctx{.kernels = &kernels,
                           .lt = &lt,
                           .cudnn = &cudnn,
                           .device = &device,
                           .workspace = workspace.data(),
                           .workspace_bytes = workspace.bytes()};
  for (const Value& v : node.inputs) {
    const TensorSpec spec = g.spec(v);
    ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(spec.bytes()));
    buffers.push_back(std::move(buffer));
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemset(buffers.back().data(), spec.dtype == DType::kInt32 ? 0 : 0x3c, spec.bytes()),
        "cudaMemset", node.name));
    ctx.input_specs.push_back(spec);
    ctx.inputs.push_back(buffers.back().data());
  }
  // The memsets run on the legacy stream, which `stream` (non-blocking) does not wait for.
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                                      "cudaStreamSynchronize", node.name));
  for (const TensorSpec& spec : node.outputs) {
    ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(spec.bytes()));
    buffers.push_back(std::move(buffer));
    ctx.outputs.push_back(buffers.back().data());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> kernel, node.op->lower(ctx, node));
  RETURN_IF_ERROR(kernel->Launch(stream.get()));
  ASSIGN_OR_RETURN(const runtime::Event begin, runtime::Event::Create(cudaEventDefault));
  ASSIGN_OR_RETURN(const runtime::Event end, runtime::Event::Create(cudaEventDefault));
  RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(begin.get(), stream.get()), "record"));
  for (int r = 0; r < repeats; ++r) RETURN_IF_ERROR(kernel->Launch(stream.get()));
  RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(end.get(), stream.get()), "record"));
  RETURN_IF_ERROR(runtime::CudaStatus(cudaEventSynchronize(end.get()), "synchronize", node.name));
  ASSIGN_OR_RETURN(const float ms, runtime::ElapsedMs(begin, end));
  return ms / repeats;
}

}  // namespace reprise
