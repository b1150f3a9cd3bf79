#include "src/ops/gpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/codegen/grid_dependency.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

std::string DeviceChoiceKey(const runtime::DeviceInfo* device) {
  if (device == nullptr) return "";
  return absl::StrCat(device->name, " sm_", device->cc_major, device->cc_minor);
}

KernelArgs& KernelArgs::AddBytes(const void* data, size_t bytes) {
  std::vector<uint64_t>& slot = slots_.emplace_back((bytes + 7) / 8, 0);
  std::memcpy(slot.data(), data, bytes);
  return *this;
}

std::vector<void*> KernelArgs::Pointers() const {
  std::vector<void*> pointers;
  for (const std::vector<uint64_t>& slot : slots_)
    pointers.push_back(const_cast<uint64_t*>(slot.data()));
  return pointers;
}

runtime::KernelSource ToKernelSource(const codegen::GeneratedKernel& kernel) {
  std::optional<std::string> waiting = codegen::WithProducerWait(kernel.code, kernel.name);
  if (!waiting.has_value()) return runtime::KernelSource{kernel.name, kernel.code, {}, false};
  return runtime::KernelSource{kernel.name, *std::move(waiting), {}, true};
}

namespace {

// cuLaunchKernelEx's configuration of a launch; `attrs` (count `n`) must outlive it.
CUlaunchConfig LaunchConfig(dim3 grid, dim3 block, unsigned shared_bytes, cudaStream_t stream,
                            CUlaunchAttribute* attrs, unsigned n) {
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = n;
  return config;
}

CUlaunchAttribute ClusterAttribute(int cluster) {
  CUlaunchAttribute dims{};
  dims.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  dims.value.clusterDim.x = static_cast<unsigned>(cluster);
  dims.value.clusterDim.y = 1;
  dims.value.clusterDim.z = 1;
  return dims;
}

// `source` compiled (or found) and allowed `shared_bytes` of dynamic shared memory; errors start
// with `where`.
absl::StatusOr<CUfunction> FunctionWithSharedMemory(const LoweringContext& context,
                                                    const runtime::KernelSource& source,
                                                    unsigned shared_bytes,
                                                    const std::string& where) {
  auto function = context.kernels->GetFunction(source);
  if (!function.ok()) {
    return absl::Status(function.status().code(),
                        absl::StrCat(where, ": ", function.status().message()));
  }
  ASSIGN_OR_RETURN(const runtime::DriverApi* driver, runtime::Driver());
  RETURN_IF_ERROR(runtime::CudaStatus(
      driver->func_set_attribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(shared_bytes)),
      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", where));
  return *function;
}

// Whether this context's plain kernels are launched as dependent launches: asked for, and a GPU
// with griddepcontrol (sm_90 and later).
bool DependentLaunch(const LoweringContext& context) {
  return context.options.dependent_launch && context.device != nullptr &&
         context.device->cc_major >= 9;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> NvrtcKernel::Create(
    const LoweringContext& context, const std::string& node_name,
    const codegen::GeneratedKernel& source, dim3 grid, dim3 block, unsigned shared_bytes,
    KernelArgs args) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const runtime::KernelSource compiled = ToKernelSource(source);
  const bool dependent = DependentLaunch(context);
  if (dependent && !compiled.waits_for_producers) {
    return absl::InternalError(absl::StrCat(
        where, ": kernel ", source.name,
        " has no body the grid-dependency wait could be put in, so it cannot be launched as a "
        "dependent launch (TrainOptions::kernels.dependent_launch)"));
  }
  // Past 48 KB, dynamic shared memory must be allowed per function.
  constexpr unsigned kDefaultSharedLimit = 48 * 1024;
  absl::StatusOr<CUfunction> function =
      shared_bytes > kDefaultSharedLimit
          ? FunctionWithSharedMemory(context, compiled, shared_bytes, where)
          : context.kernels->GetFunction(compiled);
  if (!function.ok()) {
    if (shared_bytes > kDefaultSharedLimit) return function.status();
    return absl::Status(function.status().code(),
                        absl::StrCat(where, ": ", function.status().message()));
  }
  ASSIGN_OR_RETURN(const runtime::DriverApi* driver, runtime::Driver());
  auto kernel = std::unique_ptr<NvrtcKernel>(new NvrtcKernel());
  kernel->launch_ = driver->launch_kernel_ex;
  kernel->dependent_capable_ = dependent;
  kernel->node_name_ = node_name;
  kernel->kernel_name_ = source.name;
  kernel->function_ = *function;
  kernel->grid_ = grid;
  kernel->block_ = block;
  kernel->shared_bytes_ = shared_bytes;
  kernel->args_ = std::move(args);
  kernel->arg_pointers_ = kernel->args_.Pointers();
  return std::unique_ptr<GpuKernel>(std::move(kernel));
}

absl::Status NvrtcKernel::Launch(cudaStream_t stream) const {
  CUlaunchAttribute dependent{};
  dependent.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  dependent.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config =
      LaunchConfig(grid_, block_, shared_bytes_, stream, &dependent, dependent_ ? 1 : 0);
  const CUresult result =
      launch_(&config, function_, const_cast<void**>(arg_pointers_.data()), nullptr);
  if (result == CUDA_SUCCESS) return absl::OkStatus();  // Messages only for a failure.
  return runtime::CudaStatus(
      result,
      absl::StrCat("cuLaunchKernelEx(", kernel_name_, dependent_ ? ", dependent launch)" : ")"),
      absl::StrCat("node '", node_name_, "'"));
}

std::string NvrtcKernel::Describe() const {
  return absl::StrCat("nvrtc ", kernel_name_, " grid=", grid_.x, " block=", block_.x,
                      shared_bytes_ ? absl::StrCat(" smem=", shared_bytes_) : "");
}

absl::StatusOr<std::unique_ptr<CooperativeKernel>> CooperativeKernel::Create(
    const LoweringContext& context, const std::string& node_name,
    const codegen::GeneratedKernel& source, int grid, dim3 block, unsigned shared_bytes,
    KernelArgs args) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  ASSIGN_OR_RETURN(const CUfunction function,
                   FunctionWithSharedMemory(context, ToKernelSource(source), shared_bytes, where));
  ASSIGN_OR_RETURN(const runtime::DriverApi* driver, runtime::Driver());
  int per_sm = 0;
  RETURN_IF_ERROR(runtime::CudaStatus(
      driver->occupancy_max_active_blocks(
          &per_sm, function, static_cast<int>(block.x * block.y * block.z), shared_bytes),
      "cuOccupancyMaxActiveBlocksPerMultiprocessor", where));
  if (per_sm < 1) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": kernel ", source.name, " with ", block.x * block.y * block.z, " threads and ",
        shared_bytes, " bytes of shared memory does not fit on a multiprocessor"));
  }
  auto kernel = std::unique_ptr<CooperativeKernel>(new CooperativeKernel());
  kernel->launch_ = driver->launch_kernel_ex;
  kernel->node_name_ = node_name;
  kernel->kernel_name_ = source.name;
  kernel->function_ = function;
  kernel->grid_ = std::max(1, std::min(grid, per_sm * context.device->sm_count));
  kernel->block_ = block;
  kernel->shared_bytes_ = shared_bytes;
  kernel->args_ = std::move(args);
  kernel->arg_pointers_ = kernel->args_.Pointers();
  return kernel;
}

absl::Status CooperativeKernel::Launch(cudaStream_t stream) const {
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  CUlaunchConfig config = LaunchConfig(dim3(grid_), block_, shared_bytes_, stream, &cooperative, 1);
  return runtime::CudaStatus(
      launch_(&config, function_, const_cast<void**>(arg_pointers_.data()), nullptr),
      absl::StrCat("cuLaunchKernelEx(", kernel_name_, ", cooperative)"),
      absl::StrCat("node '", node_name_, "'"));
}

std::string CooperativeKernel::Describe() const {
  return absl::StrCat("nvrtc ", kernel_name_, " cooperative grid=", grid_, " block=", block_.x,
                      " smem=", shared_bytes_);
}

absl::StatusOr<std::unique_ptr<ClusterKernel>> ClusterKernel::Create(
    const LoweringContext& context, const std::string& node_name,
    const codegen::GeneratedKernel& source, int grid, int cluster, dim3 block,
    unsigned shared_bytes, KernelArgs args) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  if (cluster < 1 || grid % cluster != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a grid of ", grid, " blocks is not made of clusters of ", cluster));
  }
  ASSIGN_OR_RETURN(const CUfunction function,
                   FunctionWithSharedMemory(context, ToKernelSource(source), shared_bytes, where));
  ASSIGN_OR_RETURN(const runtime::DriverApi* driver, runtime::Driver());
  CUlaunchAttribute dims = ClusterAttribute(cluster);
  CUlaunchConfig config = LaunchConfig(dim3(grid), block, shared_bytes, nullptr, &dims, 1);
  int active = 0;
  RETURN_IF_ERROR(
      runtime::CudaStatus(driver->occupancy_max_active_clusters(&active, function, &config),
                          "cuOccupancyMaxActiveClusters", where));
  if (active < 1) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": kernel ", source.name, " in clusters of ", cluster, " blocks of ",
                     block.x * block.y * block.z, " threads and ", shared_bytes,
                     " bytes of shared memory does not fit on the device"));
  }
  auto kernel = std::unique_ptr<ClusterKernel>(new ClusterKernel());
  kernel->launch_ = driver->launch_kernel_ex;
  kernel->node_name_ = node_name;
  kernel->kernel_name_ = source.name;
  kernel->function_ = function;
  kernel->grid_ = grid;
  kernel->cluster_ = cluster;
  kernel->active_clusters_ = active;
  kernel->block_ = block;
  kernel->shared_bytes_ = shared_bytes;
  kernel->args_ = std::move(args);
  kernel->arg_pointers_ = kernel->args_.Pointers();
  return kernel;
}

absl::Status ClusterKernel::Launch(cudaStream_t stream) const {
  CUlaunchAttribute dims = ClusterAttribute(cluster_);
  CUlaunchConfig config = LaunchConfig(dim3(grid_), block_, shared_bytes_, stream, &dims, 1);
  return runtime::CudaStatus(
      launch_(&config, function_, const_cast<void**>(arg_pointers_.data()), nullptr),
      absl::StrCat("cuLaunchKernelEx(", kernel_name_, ", clusters of ", cluster_, ")"),
      absl::StrCat("node '", node_name_, "'"));
}

std::string ClusterKernel::Describe() const {
  return absl::StrCat("nvrtc ", kernel_name_, " clusters of ", cluster_, " grid=", grid_,
                      " block=", block_.x, " smem=", shared_bytes_, " (", active_clusters_,
                      " clusters at once)");
}

KernelSequence::KernelSequence(std::vector<std::unique_ptr<GpuKernel>> kernels,
                               size_t workspace_bytes)
    : kernels_(std::move(kernels)), workspace_bytes_(workspace_bytes) {
  for (size_t i = 1; i < kernels_.size(); ++i) {
    kernels_[i]->SetDependentStart(kernels_[i - 1]->LetsDependentsStartEarly());
  }
}

absl::Status KernelSequence::Launch(cudaStream_t stream) const {
  for (const auto& kernel : kernels_) RETURN_IF_ERROR(kernel->Launch(stream));
  return absl::OkStatus();
}

std::string KernelSequence::Describe() const {
  std::string out;
  for (const auto& kernel : kernels_) {
    absl::StrAppend(&out, out.empty() ? "" : " + ", kernel->Describe());
  }
  return absl::StrCat(out, " ws ", workspace_bytes_);
}

std::string NotedKernel::Describe() const {
  return absl::StrCat(kernel_->Describe(), " (", note_, ")");
}

std::vector<std::string> KernelSequence::GeneratedKernelNames() const {
  std::vector<std::string> names;
  for (const auto& kernel : kernels_) {
    for (std::string& name : kernel->GeneratedKernelNames()) names.push_back(std::move(name));
  }
  return names;
}

dim3 GridFor(int64_t n, int block, const runtime::DeviceInfo& device) {
  const int64_t needed = (n + block - 1) / block;
  const int64_t most = static_cast<int64_t>(device.sm_count) * 8;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, most))));
}

}  // namespace reprise::ops
