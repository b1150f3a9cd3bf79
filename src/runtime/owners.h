// Move-only owners of CUDA handles. Each is made by a static Create() that reports failure as a
// Status, exposes the raw handle through get(), and releases it in its destructor, ignoring
// errors there (a destructor cannot report them, and at process exit the runtime may be gone).
//
//   ASSIGN_OR_RETURN(Stream stream, Stream::Create());
//   ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(bytes));
//   cudaMemsetAsync(buffer.data(), 0, buffer.bytes(), stream.get());
#ifndef REPRISE_SRC_RUNTIME_OWNERS_H_
#define REPRISE_SRC_RUNTIME_OWNERS_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise::runtime {

namespace internal {
struct StreamDeleter {
  void operator()(cudaStream_t stream) const;
};
struct EventDeleter {
  void operator()(cudaEvent_t event) const;
};
struct GraphDeleter {
  void operator()(cudaGraph_t graph) const;
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const;
};
struct DeviceMemoryDeleter {
  void operator()(void* data) const;
};
struct PinnedMemoryDeleter {
  void operator()(void* data) const;
};
struct ModuleDeleter {
  void operator()(CUmodule module) const;
};
}  // namespace internal

// A stream that does not synchronise with the legacy default stream.
class Stream {
 public:
  static absl::StatusOr<Stream> Create();
  // With the device's greatest priority: where streams compete for the multiprocessors, its
  // kernels' blocks are scheduled first (a captured graph keeps that per node, as instantiated
  // by GraphExec::Create and capture's device-launch instantiation).
  static absl::StatusOr<Stream> CreateHighestPriority();
  cudaStream_t get() const { return stream_.get(); }

 private:
  explicit Stream(cudaStream_t stream) : stream_(stream) {}
  std::unique_ptr<CUstream_st, internal::StreamDeleter> stream_;
};

// Timing is off by default: such events are cheaper to record and wait on.
class Event {
 public:
  static absl::StatusOr<Event> Create(unsigned int flags = cudaEventDisableTiming);
  cudaEvent_t get() const { return event_.get(); }

 private:
  explicit Event(cudaEvent_t event) : event_(event) {}
  std::unique_ptr<CUevent_st, internal::EventDeleter> event_;
};

// Milliseconds between two recorded, completed events created with timing enabled
// (flags cudaEventDefault).
absl::StatusOr<float> ElapsedMs(const Event& start, const Event& stop);

class Graph {
 public:
  // An empty graph, to be filled node by node.
  static absl::StatusOr<Graph> Create();
  // Takes ownership of `graph`, e.g. the result of cudaStreamEndCapture; null gives an empty owner.
  static Graph Adopt(cudaGraph_t graph) { return Graph(graph); }
  cudaGraph_t get() const { return graph_.get(); }

 private:
  explicit Graph(cudaGraph_t graph) : graph_(graph) {}
  std::unique_ptr<CUgraph_st, internal::GraphDeleter> graph_;
};

class GraphExec {
 public:
  // Instantiates `graph`; the executable does not refer back to it afterwards.
  static absl::StatusOr<GraphExec> Create(const Graph& graph);
  // Takes ownership of `exec`, e.g. one instantiated with flags (capture/device_launch.h).
  static GraphExec Adopt(cudaGraphExec_t exec) { return GraphExec(exec); }
  cudaGraphExec_t get() const { return exec_.get(); }

 private:
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  std::unique_ptr<CUgraphExec_st, internal::GraphExecDeleter> exec_;
};

// Device memory from cudaMalloc (256-byte aligned). Zero bytes is allowed and gives data() null.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Create(size_t bytes);
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  std::unique_ptr<void, internal::DeviceMemoryDeleter> data_;
  size_t bytes_ = 0;
};

// Page-locked host memory from cudaMallocHost, for asynchronous copies. Zero bytes is allowed.
class PinnedBuffer {
 public:
  static absl::StatusOr<PinnedBuffer> Create(size_t bytes);
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  PinnedBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  std::unique_ptr<void, internal::PinnedMemoryDeleter> data_;
  size_t bytes_ = 0;
};

// A CUBIN loaded into the current context; it must stay current (or be made current again)
// while the module and its functions are used, and when the module is destroyed.
class Module {
 public:
  static absl::StatusOr<Module> Create(absl::string_view cubin);
  // kNotFound when the module has no function of that name.
  absl::StatusOr<CUfunction> Function(absl::string_view name) const;
  CUmodule get() const { return module_.get(); }

 private:
  explicit Module(CUmodule module) : module_(module) {}
  std::unique_ptr<CUmod_st, internal::ModuleDeleter> module_;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_OWNERS_H_
