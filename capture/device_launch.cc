#include "capture/device_launch.h"

#include "absl/strings/str_cat.h"
#include "capture/device_launch_kernel.h"
#include "capture/graph_inspect.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::capture {
namespace {

constexpr char kWhat[] = "device graph launch (TrainOptions::launch.graph_launch)";

std::string MemoryKind(const void* pointer) {
  cudaPointerAttributes attributes = {};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unknown memory";
  }
  switch (attributes.type) {
    case cudaMemoryTypeUnregistered:
      return "pageable host memory";
    case cudaMemoryTypeHost:
      return "pinned host memory";
    case cudaMemoryTypeDevice:
      return absl::StrCat("memory of device ", attributes.device);
    case cudaMemoryTypeManaged:
      return "managed memory";
  }
  return "unknown memory";
}

absl::string_view InstantiateResultName(cudaGraphInstantiateResult result) {
  switch (result) {
    case cudaGraphInstantiateSuccess:
      return "instantiation reported success but failed";
    case cudaGraphInstantiateError:
      return "instantiation failed";
    case cudaGraphInstantiateInvalidStructure:
      return "the graph's structure is invalid";
    case cudaGraphInstantiateNodeOperationNotSupported:
      return "a node does what a graph launched from the device may not";
    case cudaGraphInstantiateMultipleDevicesNotSupported:
      return "the graph's nodes are on more than one device";
    case cudaGraphInstantiateConditionalHandleUnused:
      return "a conditional handle is unused";
  }
  return "instantiation failed (unknown result)";
}

}  // namespace

std::string DescribeGraphNode(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
    (void)cudaGetLastError();
    return "a node of unknown kind";
  }
  std::string text = absl::StrCat(CudaGraphNodeTypeName(type), " node");
  if (type != cudaGraphNodeTypeMemcpy) return text;
  cudaMemcpy3DParms params = {};
  if (cudaGraphMemcpyNodeGetParams(node, &params) != cudaSuccess) {
    (void)cudaGetLastError();
    return text;
  }
  return absl::StrCat(text, " (", params.extent.width, " bytes from ",
                      MemoryKind(params.srcPtr.ptr), " to ", MemoryKind(params.dstPtr.ptr), ")");
}

namespace {

// DescribeGraphNode, with the kernel's name and the plan launch the node came from where the
// captured graph tells them.
std::string DescribeStepNode(cudaGraph_t graph, cudaGraphNode_t node,
                             absl::Span<const LoweredLaunch> launches,
                             absl::Span<const std::vector<cudaGraphNode_t>> launch_nodes) {
  std::string text = DescribeGraphNode(node);
  absl::StatusOr<CudaGraphDump> dump = InspectCudaGraph(graph, launches, launch_nodes);
  if (!dump.ok()) return text;
  for (const CudaGraphNode& n : dump->nodes) {
    if (n.node.handle != reinterpret_cast<uintptr_t>(node)) continue;
    if (!n.node.kernel_name.empty())
      absl::StrAppend(&text, " running kernel '", n.node.kernel_name, "'");
    if (!launches.empty()) absl::StrAppend(&text, " of plan node '", dump->RepriseNodeName(n), "'");
  }
  return text;
}

}  // namespace

absl::StatusOr<runtime::GraphExec> InstantiateForDeviceLaunch(
    const runtime::Graph& graph, absl::Span<const LoweredLaunch> launches,
    absl::Span<const std::vector<cudaGraphNode_t>> launch_nodes) {
  if (graph.get() == nullptr) return absl::InvalidArgumentError("cannot instantiate a null graph");
  cudaGraphInstantiateParams params = {};
  // Each kernel node keeps the priority of the stream it was captured from (lane 0's is highest).
  params.flags = cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  cudaGraphExec_t raw = nullptr;
  const cudaError_t error = cudaGraphInstantiateWithParams(&raw, graph.get(), &params);
  if (error == cudaSuccess && params.result_out == cudaGraphInstantiateSuccess) {
    return runtime::GraphExec::Adopt(raw);
  }
  if (raw != nullptr) (void)cudaGraphExecDestroy(raw);
  (void)cudaGetLastError();  // Reported here; not the next launch's error.
  if ((params.result_out == cudaGraphInstantiateError ||
       params.result_out == cudaGraphInstantiateSuccess) &&
      params.errNode_out == nullptr) {
    // No node at fault, so the call itself (out of memory, say): CUDA's error says what.
    return runtime::CudaStatus(
        error == cudaSuccess ? cudaErrorUnknown : error,
        "cudaGraphInstantiateWithParams(cudaGraphInstantiateFlagDeviceLaunch)", kWhat);
  }
  std::string node = params.errNode_out != nullptr
                         ? absl::StrCat(": ", DescribeStepNode(graph.get(), params.errNode_out,
                                                               launches, launch_nodes))
                         : std::string();
  return absl::FailedPreconditionError(absl::StrCat(
      kWhat, ": the step's CUDA graph cannot be instantiated for launch from the device: ",
      InstantiateResultName(params.result_out), node, " (", cudaGetErrorName(error),
      "). A device-launched graph may hold only kernel, memcpy (device or pinned host memory), "
      "memset and child-graph nodes, all on one device"));
}

absl::StatusOr<DeviceLauncher> DeviceLauncher::Create(cudaGraphExec_t step) {
  ASSIGN_OR_RETURN(runtime::PinnedBuffer fault, runtime::PinnedBuffer::Create(sizeof(int)));
  *static_cast<volatile int*>(fault.data()) = 0;
  void* fault_on_device = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&fault_on_device, fault.data(), 0), kWhat);
  ASSIGN_OR_RETURN(runtime::Graph graph, runtime::Graph::Create());
  void* args[] = {&step, &fault_on_device};
  cudaKernelNodeParams kernel = {};
  kernel.func = const_cast<void*>(internal::TailLaunchStepKernel());
  kernel.gridDim = dim3(1, 1, 1);
  kernel.blockDim = dim3(1, 1, 1);
  kernel.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  CUDA_RETURN_IF_ERROR(cudaGraphAddKernelNode(&node, graph.get(), nullptr, 0, &kernel), kWhat);
  ASSIGN_OR_RETURN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  return DeviceLauncher(step, std::move(graph), std::move(exec), std::move(fault));
}

absl::Status DeviceLauncher::Upload(cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(cudaGraphUpload(step_, stream), kWhat);
  return absl::OkStatus();
}

absl::Status DeviceLauncher::CheckFault() const {
  const int fault = *static_cast<const volatile int*>(fault_.data());
  if (fault == 0) return absl::OkStatus();
  const auto error = static_cast<cudaError_t>(fault);
  return absl::InternalError(absl::StrCat(kWhat, ": the device refused to launch the step (",
                                          cudaGetErrorName(error), ": ", cudaGetErrorString(error),
                                          "); the step did not run and the stream has failed"));
}

absl::Status DeviceLauncher::Launch(cudaStream_t stream) {
  RETURN_IF_ERROR(CheckFault());
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_.get(), stream), kWhat);
  return absl::OkStatus();
}

}  // namespace reprise::capture
