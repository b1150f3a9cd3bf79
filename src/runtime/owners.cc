#include "src/runtime/owners.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace internal {

void StreamDeleter::operator()(cudaStream_t stream) const { (void)cudaStreamDestroy(stream); }
void EventDeleter::operator()(cudaEvent_t event) const { (void)cudaEventDestroy(event); }
void GraphDeleter::operator()(cudaGraph_t graph) const { (void)cudaGraphDestroy(graph); }
void GraphExecDeleter::operator()(cudaGraphExec_t exec) const { (void)cudaGraphExecDestroy(exec); }
void DeviceMemoryDeleter::operator()(void* data) const { (void)cudaFree(data); }
void PinnedMemoryDeleter::operator()(void* data) const { (void)cudaFreeHost(data); }
void ModuleDeleter::operator()(CUmodule module) const {
  // A module exists only if the driver was resolved to load it.
  if (absl::StatusOr<const DriverApi*> driver = Driver(); driver.ok()) {
    (void)(*driver)->module_unload(module);
  }
}

}  // namespace internal

absl::StatusOr<Stream> Stream::Create() {
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "new stream");
  return Stream(stream);
}

absl::StatusOr<Stream> Stream::CreateHighestPriority() {
  int least = 0, greatest = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                       "stream priority range");
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest),
                       "new stream of the greatest priority");
  return Stream(stream);
}

absl::StatusOr<Event> Event::Create(unsigned int flags) {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags), "new event");
  return Event(event);
}

absl::StatusOr<float> ElapsedMs(const Event& start, const Event& stop) {
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()), "event timing");
  return ms;
}

absl::StatusOr<Graph> Graph::Create() {
  cudaGraph_t graph = nullptr;
  CUDA_RETURN_IF_ERROR(cudaGraphCreate(&graph, 0), "new graph");
  return Graph(graph);
}

absl::StatusOr<GraphExec> GraphExec::Create(const Graph& graph) {
  if (graph.get() == nullptr) return absl::InvalidArgumentError("cannot instantiate a null graph");
  cudaGraphExec_t exec = nullptr;
  // Each kernel node keeps the priority of the stream it was captured from.
  CUDA_RETURN_IF_ERROR(
      cudaGraphInstantiateWithFlags(&exec, graph.get(), cudaGraphInstantiateFlagUseNodePriority),
      "graph instantiation");
  return GraphExec(exec);
}

// A failed allocation also sets the runtime's last error, which the next launch check
// (cudaGetLastError after a launch) would report as its own failure: the out-of-memory Status
// is returned here, and the error cleared.
namespace {
absl::Status AllocationStatus(cudaError_t error, absl::string_view call, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return CudaStatus(error, call, what);
}
}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(size_t bytes) {
  void* data = nullptr;
  if (bytes > 0) {
    RETURN_IF_ERROR(AllocationStatus(cudaMalloc(&data, bytes), "cudaMalloc",
                                     absl::StrCat("device buffer of ", bytes, " bytes")));
  }
  return DeviceBuffer(data, bytes);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Create(size_t bytes) {
  void* data = nullptr;
  if (bytes > 0) {
    RETURN_IF_ERROR(AllocationStatus(cudaMallocHost(&data, bytes), "cudaMallocHost",
                                     absl::StrCat("pinned buffer of ", bytes, " bytes")));
  }
  return PinnedBuffer(data, bytes);
}

absl::StatusOr<Module> Module::Create(absl::string_view cubin) {
  if (cubin.empty()) return absl::InvalidArgumentError("cannot load an empty CUBIN");
  ASSIGN_OR_RETURN(const DriverApi* driver, Driver());
  CUmodule module = nullptr;
  RETURN_IF_ERROR(CudaStatus(driver->module_load_data(&module, cubin.data()), "cuModuleLoadData",
                             absl::StrCat("CUBIN of ", cubin.size(), " bytes")));
  return Module(module);
}

absl::StatusOr<CUfunction> Module::Function(absl::string_view name) const {
  ASSIGN_OR_RETURN(const DriverApi* driver, Driver());
  const std::string terminated(name);
  CUfunction function = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(driver->module_get_function(&function, module_.get(), terminated.c_str()),
                 "cuModuleGetFunction", absl::StrCat("kernel '", name, "'")));
  return function;
}

}  // namespace reprise::runtime
