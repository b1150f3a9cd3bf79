// GpuKernel: one launch of a plan, lowered from one node with its device addresses resolved.
// Launch() only enqueues work on the given stream; it never allocates, compiles, synchronises or
// picks algorithms, so it is safe to record under CUDA graph capture.
#ifndef REPRISE_SRC_OPS_GPU_KERNEL_H_
#define REPRISE_SRC_OPS_GPU_KERNEL_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/lt_matmul.h"

namespace reprise::parallel {
class Communicator;  // Collectives across data-parallel ranks (src/parallel/communicator.h).
}  // namespace reprise::parallel

namespace reprise::ops {

class GpuKernel {
 public:
  virtual ~GpuKernel() = default;
  virtual absl::Status Launch(cudaStream_t stream) const = 0;
  // One line for dumps and error messages: what runs and with which launch shape.
  virtual std::string Describe() const = 0;
  // Names of the NVRTC kernels one Launch() runs, in order; empty for library calls (cuBLASLt) and
  // copies, whose kernels are not ours to name. Dumps match them to captured CUDA graph nodes.
  virtual std::vector<std::string> GeneratedKernelNames() const { return {}; }
  // Bytes of its lane's workspace (LoweringContext::workspace) one Launch() uses. Every kernel
  // that uses the workspace must say so: only this much of it is backed by memory
  // (src/runtime/lane_workspaces.h).
  virtual size_t WorkspaceBytes() const { return 0; }
  // Brings state the kernel keeps between launches in a form of its own back to where the rest of
  // the engine reads it, enqueued on `stream`; a no-op for almost every kernel. The double-
  // buffered whole-step MLP kernel (codegen::MlpGuard) leaves its parameters and velocities in its
  // shadow state every other applied step: whoever reads or writes the parameters or the optimizer
  // state outside the step (the host, another graph) must settle every launch of the plan first.
  virtual absl::Status Settle(cudaStream_t /*stream*/) const { return absl::OkStatus(); }
  // Only the part of Settle that brings the non-finite guard's counters up to date (the
  // whole-step MLP kernel's deferred verdict counts each step in the next), enqueued on `stream`:
  // for reading them between steps without moving any parameter.
  virtual absl::Status SettleCounters(cudaStream_t /*stream*/) const { return absl::OkStatus(); }
  // Whether Settle does anything (the engine keeps a list of the kernels that need it).
  virtual bool NeedsSettle() const { return false; }
  // Programmatic dependent launch (LoweringOptions::dependent_launch): whether a kernel may start
  // as a dependent launch right after this launch's last kernel (ours, and cuDNN's convolutions:
  // not cuBLASLt's products, after which our kernels launched early made GPT-2's and the MLPs'
  // steps slower on an H200), and whether this launch's first kernel may (set once, before the
  // step is captured, by capture::AllowDependentStarts). A KernelSequence chains its own.
  virtual bool LetsDependentsStartEarly() const { return false; }
  virtual void SetDependentStart(bool /*allowed*/) {}
};

// How the step's launches choose their kernels and algorithms: the same for every node, set once
// from TrainOptions (src/api/compile_options.h).
struct LoweringOptions {
  bool allow_tf32 = false;
  // Library algorithms must give the same bits on every run (no atomics-based reductions).
  bool deterministic = false;
  // Pick cuDNN convolution algorithms by timing them on the device, not by heuristics.
  bool measure_conv_algorithms = false;
  // cuBLASLt products: time the heuristic's first candidates here and keep the fastest.
  bool measure_matmul_algorithms = false;
  // Convolutions with few input channels run as our own kernels where they apply
  // (TrainOptions::kernels.narrow_convolutions; src/ops/narrow_conv.h).
  bool narrow_convolutions = true;
  // 3x3 weight gradients run as our own kernel where it applies (TrainOptions::
  // own_weight_gradients; src/ops/wgrad3x3.h).
  bool own_weight_gradients = false;
  // Which cuDNN API runs convolutions (TrainOptions::kernels.conv_api): the legacy one
  // (src/runtime/cudnn_conv.h) or the graph API (src/runtime/cudnn_conv_graph.h).
  enum class ConvApi : uint8_t { kLegacy, kGraph };
  ConvApi conv_api = ConvApi::kLegacy;
  // Plain NVRTC kernels launched as programmatic dependent launches on sm_90 and later: each may
  // be scheduled while the kernel before it drains, and waits for it first thing
  // (src/codegen/grid_dependency.h; TrainOptions::kernels.dependent_launch), where the kernel
  // before it is one of ours or a cuDNN convolution (capture::AllowDependentStarts); with
  // dependent_launch_after_libraries, after any kernel.
  bool dependent_launch = false;
  bool dependent_launch_after_libraries = false;
  // The tiled batch norms' statistics kernels finalize in their last blocks, given the lane's
  // tickets (TrainOptions::kernels.batch_norm_finalize_in_stats).
  bool batch_norm_finalize_in_stats = false;
  // Which library runs matmul_bias_gelu_aux (TrainOptions::kernels.gelu_product_library):
  // kFastest races cuDNN's graph-API plan against cuBLASLt's epilogue where measuring
  // (src/ops/gelu_product_race.h); kCudnn takes cuDNN's wherever it has a plan
  // (src/ops/gelu_product_cudnn.h).
  enum class GeluProductLibrary : uint8_t { kFastest, kCublasLt, kCudnn };
  GeluProductLibrary gelu_product_library = GeluProductLibrary::kFastest;
};

// What a lowering needs: shared device resources and this node's device addresses.
struct LoweringContext {
  runtime::KernelStore* kernels = nullptr;
  const runtime::LtHandle* lt = nullptr;
  const runtime::CudnnHandle* cudnn = nullptr;
  const runtime::DeviceInfo* device = nullptr;
  void* workspace = nullptr;  // cuBLASLt and cuDNN workspace of the node's lane.
  size_t workspace_bytes = 0;
  // The lane's tickets: words that are zero whenever no launch runs on the lane. A kernel may
  // count its blocks' arrivals on them if it leaves them zero; the lane's launches run one after
  // another, so they share them (runtime::LaneWorkspaces::tickets). Null where the lane has none.
  unsigned* tickets = nullptr;
  int64_t ticket_words = 0;
  LoweringOptions options;
  // The data-parallel ranks' collectives, for communication ops; null without data parallelism.
  parallel::Communicator* communicator = nullptr;
  std::vector<TensorSpec> input_specs;
  std::vector<void*> inputs;   // Device address of each input, in node order.
  std::vector<void*> outputs;  // Device address of each output.
};

// Which GPU a library's choice (a cuDNN plan, a cuBLASLt configuration) was made for, in the keys
// of its caches and records: its name and architecture; "" without a device.
std::string DeviceChoiceKey(const runtime::DeviceInfo* device);

// Packs kernel arguments by value so that the pointer array cuLaunchKernel reads stays valid.
class KernelArgs {
 public:
  template <typename T>
  KernelArgs& Add(T value) {
    static_assert(sizeof(T) <= 8, "kernel arguments are pointers or scalars; use AddBytes");
    return AddBytes(&value, sizeof(T));
  }
  // A by-value struct argument (e.g. a table of tensors), copied.
  KernelArgs& AddBytes(const void* data, size_t bytes);
  // Valid while this object lives and is not added to.
  std::vector<void*> Pointers() const;

 private:
  std::vector<std::vector<uint64_t>> slots_;  // uint64 keeps every argument 8-byte aligned.
};

// A kernel compiled by NVRTC through the kernel store, launched with fixed arguments.
class NvrtcKernel : public GpuKernel {
 public:
  // Compiles (or finds) `source` and binds the launch; errors name `node_name`.
  static absl::StatusOr<std::unique_ptr<GpuKernel>> Create(const LoweringContext& context,
                                                           const std::string& node_name,
                                                           const codegen::GeneratedKernel& source,
                                                           dim3 grid, dim3 block,
                                                           unsigned shared_bytes, KernelArgs args);
  absl::Status Launch(cudaStream_t stream) const override;
  std::string Describe() const override;
  std::vector<std::string> GeneratedKernelNames() const override { return {kernel_name_}; }
  bool LetsDependentsStartEarly() const override { return true; }
  void SetDependentStart(bool allowed) override { dependent_ = dependent_capable_ && allowed; }

 private:
  NvrtcKernel() = default;
  std::string node_name_, kernel_name_;
  CUfunction function_ = nullptr;
  decltype(&::cuLaunchKernelEx) launch_ = nullptr;  // From the driver, found at run time.
  // Launched with programmatic stream serialization: where asked for and the GPU has it
  // (LoweringOptions::dependent_launch), once SetDependentStart allows it.
  bool dependent_capable_ = false, dependent_ = false;
  dim3 grid_, block_;
  unsigned shared_bytes_ = 0;
  KernelArgs args_;
  std::vector<void*> arg_pointers_;
};

// A kernel compiled by NVRTC and launched cooperatively (cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_COOPERATIVE): every block is resident at once, so blocks may wait for each
// other (grid barriers). Capturable in CUDA graphs like any kernel launch.
class CooperativeKernel : public GpuKernel {
 public:
  // Compiles (or finds) `source`, allows it `shared_bytes` of dynamic shared memory and launches
  // min(grid, blocks that fit at once on the device) blocks. kUnimplemented, naming the node,
  // when not even one block fits on a multiprocessor.
  static absl::StatusOr<std::unique_ptr<CooperativeKernel>> Create(
      const LoweringContext& context, const std::string& node_name,
      const codegen::GeneratedKernel& source, int grid, dim3 block, unsigned shared_bytes,
      KernelArgs args);
  absl::Status Launch(cudaStream_t stream) const override;
  std::string Describe() const override;
  std::vector<std::string> GeneratedKernelNames() const override { return {kernel_name_}; }
  bool LetsDependentsStartEarly() const override { return true; }
  int grid() const { return grid_; }

 private:
  CooperativeKernel() = default;
  std::string node_name_, kernel_name_;
  CUfunction function_ = nullptr;
  decltype(&::cuLaunchKernelEx) launch_ = nullptr;
  int grid_ = 0;
  dim3 block_;
  unsigned shared_bytes_ = 0;
  KernelArgs args_;
  std::vector<void*> arg_pointers_;
};

// A kernel compiled by NVRTC and launched in thread-block clusters (cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION): the `cluster` blocks of each run at once and may read
// each other's shared memory; clusters are independent, so the grid may exceed one wave.
class ClusterKernel : public GpuKernel {
 public:
  // Compiles (or finds) `source` and allows it `shared_bytes` of dynamic shared memory.
  // kUnimplemented, naming the node, when not even one cluster fits on the device.
  static absl::StatusOr<std::unique_ptr<ClusterKernel>> Create(
      const LoweringContext& context, const std::string& node_name,
      const codegen::GeneratedKernel& source, int grid, int cluster, dim3 block,
      unsigned shared_bytes, KernelArgs args);
  absl::Status Launch(cudaStream_t stream) const override;
  std::string Describe() const override;
  std::vector<std::string> GeneratedKernelNames() const override { return {kernel_name_}; }
  bool LetsDependentsStartEarly() const override { return true; }

 private:
  ClusterKernel() = default;
  std::string node_name_, kernel_name_;
  CUfunction function_ = nullptr;
  decltype(&::cuLaunchKernelEx) launch_ = nullptr;
  int grid_ = 0, cluster_ = 1, active_clusters_ = 0;
  dim3 block_;
  unsigned shared_bytes_ = 0;
  KernelArgs args_;
  std::vector<void*> arg_pointers_;
};

// One node's kernels launched in order on one stream, the later ones reading what the earlier ones
// left in the lane's workspace (`workspace_bytes` of it). Subclasses describe themselves their
// own way (the batch norm's launches, the multi-tensor ops' tables).
class KernelSequence : public GpuKernel {
 public:
  // Lets each kernel after the first start as a dependent launch where the one before it
  // LetsDependentsStartEarly.
  KernelSequence(std::vector<std::unique_ptr<GpuKernel>> kernels, size_t workspace_bytes);
  absl::Status Launch(cudaStream_t stream) const override;
  std::string Describe() const override;  // The kernels' descriptions joined by " + ".
  std::vector<std::string> GeneratedKernelNames() const override;
  size_t WorkspaceBytes() const override { return workspace_bytes_; }
  bool LetsDependentsStartEarly() const override {
    return !kernels_.empty() && kernels_.back()->LetsDependentsStartEarly();
  }
  void SetDependentStart(bool allowed) override {
    if (!kernels_.empty()) kernels_.front()->SetDependentStart(allowed);
  }

 protected:
  const std::vector<std::unique_ptr<GpuKernel>>& kernels() const { return kernels_; }

 private:
  std::vector<std::unique_ptr<GpuKernel>> kernels_;
  size_t workspace_bytes_;
};

// A kernel whose description ends with a note saying why it runs (a library chosen over
// another, and by how much); everything else is the wrapped kernel's.
class NotedKernel : public GpuKernel {
 public:
  NotedKernel(std::unique_ptr<GpuKernel> kernel, std::string note)
      : kernel_(std::move(kernel)), note_(std::move(note)) {}
  absl::Status Launch(cudaStream_t stream) const override { return kernel_->Launch(stream); }
  std::string Describe() const override;  // "<the kernel's> (<note>)"
  std::vector<std::string> GeneratedKernelNames() const override {
    return kernel_->GeneratedKernelNames();
  }
  size_t WorkspaceBytes() const override { return kernel_->WorkspaceBytes(); }
  absl::Status Settle(cudaStream_t stream) const override { return kernel_->Settle(stream); }
  absl::Status SettleCounters(cudaStream_t stream) const override {
    return kernel_->SettleCounters(stream);
  }
  bool NeedsSettle() const override { return kernel_->NeedsSettle(); }
  bool LetsDependentsStartEarly() const override { return kernel_->LetsDependentsStartEarly(); }
  void SetDependentStart(bool allowed) override { kernel_->SetDependentStart(allowed); }

 private:
  std::unique_ptr<GpuKernel> kernel_;
  std::string note_;
};

// Grid for a grid-stride loop over n elements: enough blocks to fill the device, no more.
dim3 GridFor(int64_t n, int block, const runtime::DeviceInfo& device);

// The source NVRTC compiles for a generated kernel: its code with the grid-dependency wait first in
// its body (KernelSource::waits_for_producers says whether that body was found).
runtime::KernelSource ToKernelSource(const codegen::GeneratedKernel& kernel);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_GPU_KERNEL_H_
