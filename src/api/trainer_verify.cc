// Trainer::Impl::Verify: the same plan run as a captured CUDA graph and eagerly, step by step from
// one snapshot of the whole arena, compared bit for bit after every step.
//
// Both runs execute one launch list: the trainer's own lowered launches (borrowed, not lowered
// again) with a device-to-device copy after each launch that produces a gradient. Gradients are
// transient in the memory plan: the space of one is reused by later tensors of the same step, so
// without the copies nothing of them would be left to compare. The copies only read the gradient
// and write a buffer of Verify's own, and every launch that waited for the gradient's producer
// waits for its copies instead, so no launch can overwrite a gradient before it is copied and no
// value the step computes changes. The plan, its memory and its kernels are the trainer's; only
// the graph is recorded anew (with the copy nodes), so the trainer's own executable graph and its
// counters are untouched.
//
// The two runs take turns on the one arena (the kernels' addresses point into it): two device
// buffers keep each run's arena between its steps, and the arena as it was before Verify is put
// back at the end.
#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/api/verify_compare.h"
#include "src/api/verify_launches.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// Another launch's kernel, run as is: the verify list borrows the trainer's kernels.
class BorrowedKernel : public ops::GpuKernel {
 public:
  explicit BorrowedKernel(const ops::GpuKernel* kernel) : kernel_(kernel) {}
  absl::Status Launch(cudaStream_t stream) const override { return kernel_->Launch(stream); }
  std::string Describe() const override { return kernel_->Describe(); }
  std::vector<std::string> GeneratedKernelNames() const override {
    return kernel_->GeneratedKernelNames();
  }

 private:
  const ops::GpuKernel* kernel_;
};

// A gradient copied out of its transient buffer right after its producer.
class GradientCopy : public ops::GpuKernel {
 public:
  GradientCopy(void* destination, const void* source, size_t bytes, std::string parameter)
      : destination_(destination),
        source_(source),
        bytes_(bytes),
        parameter_(std::move(parameter)) {}
  absl::Status Launch(cudaStream_t stream) const override {
    return runtime::CudaStatus(
        cudaMemcpyAsync(destination_, source_, bytes_, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync", absl::StrCat("verify copy of the gradient of '", parameter_, "'"));
  }
  std::string Describe() const override {
    return absl::StrCat("verify copy of the gradient of '", parameter_, "' (", bytes_, " bytes)");
  }

 private:
  void* destination_;
  const void* source_;
  size_t bytes_;
  std::string parameter_;
};

// The test-only fault (Trainer::Impl::VerifyFault): the input copy, then a memset of a float32
// input whose byte is read from the host by value when the launch is recorded or run. Captured,
// it keeps the byte of the step it was recorded at; eager, it takes each step's.
class InputCopyWithFrozenScalar : public ops::GpuKernel {
 public:
  InputCopyWithFrozenScalar(const ops::GpuKernel* copy, void* slot, size_t bytes, const int* step)
      : copy_(copy), slot_(slot), bytes_(bytes), step_(step) {}
  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(copy_->Launch(stream));
    // 0x38383838 .. 0x3b3b3b3b are the floats 4.4e-5, 1.8e-4, 7.1e-4 and 2.9e-3.
    const int byte = 0x38 + *step_ % 4;
    return runtime::CudaStatus(cudaMemsetAsync(slot_, byte, bytes_, stream), "cudaMemsetAsync",
                               "verify fault");
  }
  std::string Describe() const override {
    return absl::StrCat(copy_->Describe(), " + verify fault (host scalar frozen at capture)");
  }

 private:
  const ops::GpuKernel* copy_;
  void* slot_;
  size_t bytes_;
  const int* step_;
};

// Where a compared tensor is read from on the device.
struct Source {
  const char* data;
  size_t bytes;
};

absl::Status Gather(absl::Span<const ComparedTensor> tensors, absl::Span<const Source> sources,
                    char* host, cudaStream_t stream) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(host + tensors[i].offset, sources[i].data, sources[i].bytes,
                        cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync", absl::StrCat("verify reading '", tensors[i].name, "'")));
  }
  return runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "verify");
}

absl::Status CopyArena(void* to, const void* from, size_t bytes, cudaStream_t stream,
                       cudaMemcpyKind kind) {
  return runtime::CudaStatus(cudaMemcpyAsync(to, from, bytes, kind, stream), "cudaMemcpyAsync",
                             "verify arena snapshot");
}

}  // namespace

absl::StatusOr<VerifyResult> Trainer::Impl::Verify(int steps, const VerifyFault& fault) {
  if (steps <= 0) return absl::InvalidArgumentError("Verify needs a positive step count");
  RETURN_IF_ERROR(Synchronize());
  const Graph& g = plan_.graph();
  cudaStream_t stream = stream_->get();
  char* arena = static_cast<char*>(arena_->data());
  const size_t arena_bytes = static_cast<size_t>(plan_.memory.arena_bytes);

  // The lowered launch of each node, and the first launch that writes each leaf in place.
  absl::flat_hash_map<int32_t, int> launch_of;
  absl::flat_hash_map<int32_t, int> writer_of;
  for (size_t i = 0; i < plan_.launches.size(); ++i) {
    const Node& node = g.node(plan_.launches[i].node);
    launch_of[node.id] = static_cast<int>(i) + 1;  // Launch 0 is the input copy.
    for (int m : ir::MutatedInputs(node)) {
      writer_of.try_emplace(node.inputs[m].node, static_cast<int>(i) + 1);
    }
  }

  // Gradients that have a buffer, in parameter order, and their places in Verify's own buffer.
  VerifyResult result;
  struct Gradient {
    int32_t parameter;
    const passes::Buffer* buffer;
    int launch;
    int64_t offset = 0;
  };
  std::vector<Gradient> gradients;
  int64_t gradient_bytes = 0;
  for (int32_t parameter : plan_.training.parameters) {
    auto it = plan_.training.gradients.find(parameter);
    const passes::Buffer* b =
        it == plan_.training.gradients.end() ? nullptr : plan_.memory.Find(it->second);
    auto launch =
        it == plan_.training.gradients.end() ? launch_of.end() : launch_of.find(it->second.node);
    if (b == nullptr || launch == launch_of.end()) {
      result.gradients_not_materialized.push_back(g.node(parameter).name);
      continue;
    }
    gradients.push_back({parameter, b, launch->second, gradient_bytes});
    gradient_bytes += (b->bytes + passes::kBufferAlignment - 1) / passes::kBufferAlignment *
                      passes::kBufferAlignment;
  }
  ASSIGN_OR_RETURN(runtime::DeviceBuffer gradient_copies,
                   runtime::DeviceBuffer::Create(static_cast<size_t>(gradient_bytes)));
  char* copies = static_cast<char*>(gradient_copies.data());

  // The launch list both runs execute (src/api/verify_launches.h).
  int verify_step = 0;
  std::vector<LaunchOrder> orders;
  std::vector<int> copies_after(launches_.size(), 0);
  std::vector<std::vector<const Gradient*>> produced(launches_.size());
  for (const capture::LoweredLaunch& launch : launches_) {
    orders.push_back({launch.lane, launch.waits});
  }
  for (const Gradient& gradient : gradients) {
    ++copies_after[gradient.launch];
    produced[gradient.launch].push_back(&gradient);
  }
  std::vector<capture::LoweredLaunch> launches;
  for (VerifyLaunch& slot : InterleaveCopies(orders, copies_after)) {
    std::unique_ptr<ops::GpuKernel> kernel;
    std::string name;
    if (slot.original < 0) {
      const Gradient& gradient = *produced[slot.producer][slot.copy];
      const std::string& parameter = g.node(gradient.parameter).name;
      name = absl::StrCat("verify_copy.", parameter);
      kernel =
          std::make_unique<GradientCopy>(copies + gradient.offset, arena + gradient.buffer->offset,
                                         gradient.buffer->bytes, parameter);
    } else if (slot.original == 0 && !fault.frozen_input.empty()) {
      const capture::LoweredLaunch& old = launches_[0];
      name = old.node_name;
      ASSIGN_OR_RETURN(const int32_t input, FindInput(fault.frozen_input));
      const TensorSpec& spec = g.node(input).outputs[0];
      if (spec.dtype != DType::kFloat32) {
        return absl::InvalidArgumentError(
            absl::StrCat("verify fault: input '", fault.frozen_input, "' is not float32"));
      }
      kernel = std::make_unique<InputCopyWithFrozenScalar>(old.kernel.get(), InputSlot(input),
                                                           spec.bytes(), &verify_step);
    } else {
      const capture::LoweredLaunch& old = launches_[slot.original];
      name = old.node_name;
      kernel = std::make_unique<BorrowedKernel>(old.kernel.get());
    }
    launches.push_back({std::move(name), slot.lane, std::move(slot.waits), std::move(kernel)});
  }
  ASSIGN_OR_RETURN(capture::Lanes lanes, capture::Lanes::Create(launches));
  // Launched as the trainer launches its own step (from the device or the host, as
  // TrainOptions::launch.graph_launch chose), so that the bits compared are the ones that launch
  // gives.
  ASSIGN_OR_RETURN(capture::CapturedStep graph, CaptureStep(launches, lanes));

  // What is compared, in the order the step writes it.
  std::vector<ComparedTensor> compared;
  std::vector<Source> sources;
  int64_t host_bytes = 0;
  auto add = [&](std::string name, std::string kind, int32_t writer, int order, Value value,
                 const char* data, int64_t bytes) {
    ComparedTensor t;
    t.name = std::move(name);
    t.kind = std::move(kind);
    t.node = writer >= 0 ? g.node(writer).name : "(none: the step does not write it)";
    t.op = writer >= 0 ? std::string(g.node(writer).op_name()) : "-";
    t.dtype = g.spec(value).dtype;
    t.offset = host_bytes;
    t.bytes = bytes;
    t.order = order;
    host_bytes += bytes;
    compared.push_back(std::move(t));
    sources.push_back({data, static_cast<size_t>(bytes)});
  };
  const Value loss = plan_.training.loss;
  const passes::Buffer* loss_buffer = plan_.memory.Find(loss);
  if (loss_buffer == nullptr) return absl::InternalError("the loss has no place in the arena");
  add(g.node(loss.node).name, "loss", loss.node, launch_of[loss.node], loss,
      arena + loss_buffer->offset, loss_buffer->bytes);
  for (const Gradient& gradient : gradients) {
    add(absl::StrCat(g.node(gradient.parameter).name, ".grad"), "gradient",
        gradient.buffer->value.node, gradient.launch, gradient.buffer->value,
        copies + gradient.offset, gradient.buffer->bytes);
  }
  ASSIGN_OR_RETURN(std::vector<const passes::Buffer*> weights, WeightBuffers());
  for (size_t i = 0; i < weights.size(); ++i) {
    const passes::Buffer* b = weights[i];
    const int32_t leaf = b->value.node;
    const std::string kind = g.node(leaf).op == &ir::ParameterOp()            ? "parameter"
                             : b->cls == passes::BufferClass::kOptimizerState ? "optimizer state"
                                                                              : "state";
    auto writer = writer_of.find(leaf);
    const int32_t writer_node =
        writer == writer_of.end() ? -1 : plan_.launches[writer->second - 1].node;
    add(weight_names_[i], kind, writer_node, writer == writer_of.end() ? INT_MAX : writer->second,
        b->value, arena + b->offset, b->bytes);
  }
  // Sort the tensors and their sources together.
  std::vector<size_t> order(compared.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return std::tie(compared[x].order, compared[x].name) <
           std::tie(compared[y].order, compared[y].name);
  });
  std::vector<ComparedTensor> sorted_tensors;
  std::vector<Source> sorted_sources;
  for (size_t i : order) {
    sorted_tensors.push_back(compared[i]);
    sorted_sources.push_back(sources[i]);
  }
  result.tensors_compared = static_cast<int64_t>(sorted_tensors.size());

  // Each run's arena between its steps, the arena to put back, and the host copies compared.
  absl::StatusOr<runtime::DeviceBuffer> graph_arena = runtime::DeviceBuffer::Create(arena_bytes);
  absl::StatusOr<runtime::DeviceBuffer> eager_arena = runtime::DeviceBuffer::Create(arena_bytes);
  if (!graph_arena.ok() || !eager_arena.ok()) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "Verify needs two more copies of the arena (", arena_bytes, " bytes each) on the device: ",
        (!graph_arena.ok() ? graph_arena : eager_arena).status().message()));
  }
  ASSIGN_OR_RETURN(runtime::PinnedBuffer graph_host,
                   runtime::PinnedBuffer::Create(std::max<int64_t>(host_bytes, 1)));
  ASSIGN_OR_RETURN(runtime::PinnedBuffer eager_host,
                   runtime::PinnedBuffer::Create(std::max<int64_t>(host_bytes, 1)));
  std::string start(arena_bytes, '\0');
  RETURN_IF_ERROR(CopyArena(start.data(), arena, arena_bytes, stream, cudaMemcpyDeviceToHost));
  RETURN_IF_ERROR(
      CopyArena(eager_arena->data(), arena, arena_bytes, stream, cudaMemcpyDeviceToDevice));
  ++verify_runs_;

  auto run_both = [&]() -> absl::Status {
    char* graph_snapshot = static_cast<char*>(graph_host.data());
    char* eager_snapshot = static_cast<char*>(eager_host.data());
    for (int s = 0; s < steps; ++s) {
      verify_step = s;
      if (s > 0) {
        RETURN_IF_ERROR(
            CopyArena(arena, graph_arena->data(), arena_bytes, stream, cudaMemcpyDeviceToDevice));
      }
      RETURN_IF_ERROR(graph.Replay(stream));
      RETURN_IF_ERROR(Gather(sorted_tensors, sorted_sources, graph_snapshot, stream));
      RETURN_IF_ERROR(
          CopyArena(graph_arena->data(), arena, arena_bytes, stream, cudaMemcpyDeviceToDevice));
      RETURN_IF_ERROR(
          CopyArena(arena, eager_arena->data(), arena_bytes, stream, cudaMemcpyDeviceToDevice));
      RETURN_IF_ERROR(lanes.Run(launches, stream, /*sync_each=*/false));
      RETURN_IF_ERROR(Gather(sorted_tensors, sorted_sources, eager_snapshot, stream));
      RETURN_IF_ERROR(
          CopyArena(eager_arena->data(), arena, arena_bytes, stream, cudaMemcpyDeviceToDevice));
      result.steps = s + 1;
      result.mismatch =
          CompareSnapshots(sorted_tensors, absl::string_view(graph_snapshot, host_bytes),
                           absl::string_view(eager_snapshot, host_bytes), s);
      if (result.mismatch.has_value()) break;
    }
    return absl::OkStatus();
  };
  const absl::Status ran = run_both();
  // The trainer's state as it was, whatever happened above.
  RETURN_IF_ERROR(CopyArena(arena, start.data(), arena_bytes, stream, cudaMemcpyHostToDevice));
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                                      "verify restoring the arena"));
  RETURN_IF_ERROR(ran);
  return result;
}

absl::StatusOr<VerifyResult> Trainer::Verify(int steps) { return impl_->Verify(steps); }

}  // namespace reprise
