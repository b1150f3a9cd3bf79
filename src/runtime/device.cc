#include "src/runtime/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace {

template <typename Fn>
absl::Status Resolve(const char* symbol, Fn* fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  RETURN_IF_ERROR(CudaStatus(
      cudaGetDriverEntryPointByVersion(symbol, &address, CUDA_VERSION, cudaEnableDefault, &found),
      "cudaGetDriverEntryPointByVersion", symbol));
  if (found != cudaDriverEntryPointSuccess || address == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver lacks ", symbol, " for CUDA ", CUDA_VERSION));
  }
  *fn = reinterpret_cast<Fn>(address);
  return absl::OkStatus();
}

absl::StatusOr<DriverApi> ResolveDriver() {
  DriverApi api;
  RETURN_IF_ERROR(Resolve("cuGetErrorName", &api.get_error_name));
  RETURN_IF_ERROR(Resolve("cuGetErrorString", &api.get_error_string));
  RETURN_IF_ERROR(Resolve("cuModuleLoadData", &api.module_load_data));
  RETURN_IF_ERROR(Resolve("cuModuleGetFunction", &api.module_get_function));
  RETURN_IF_ERROR(Resolve("cuModuleUnload", &api.module_unload));
  RETURN_IF_ERROR(Resolve("cuLaunchKernel", &api.launch_kernel));
  RETURN_IF_ERROR(Resolve("cuLaunchKernelEx", &api.launch_kernel_ex));
  RETURN_IF_ERROR(
      Resolve("cuOccupancyMaxActiveBlocksPerMultiprocessor", &api.occupancy_max_active_blocks));
  RETURN_IF_ERROR(Resolve("cuOccupancyMaxActiveClusters", &api.occupancy_max_active_clusters));
  RETURN_IF_ERROR(Resolve("cuFuncSetAttribute", &api.func_set_attribute));
  RETURN_IF_ERROR(Resolve("cuMemAddressReserve", &api.mem_address_reserve));
  RETURN_IF_ERROR(Resolve("cuMemAddressFree", &api.mem_address_free));
  RETURN_IF_ERROR(Resolve("cuMemCreate", &api.mem_create));
  RETURN_IF_ERROR(Resolve("cuMemRelease", &api.mem_release));
  RETURN_IF_ERROR(Resolve("cuMemMap", &api.mem_map));
  RETURN_IF_ERROR(Resolve("cuMemUnmap", &api.mem_unmap));
  RETURN_IF_ERROR(Resolve("cuMemSetAccess", &api.mem_set_access));
  RETURN_IF_ERROR(Resolve("cuMemGetAllocationGranularity", &api.mem_get_allocation_granularity));
  return api;
}

}  // namespace

absl::StatusOr<int> VisibleDeviceCount() {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  // No GPU: none present, no driver, or only the toolkit's stub of the driver library (as in a
  // container without the host's driver mounted).
  if (result == cudaErrorNoDevice || result == cudaErrorInsufficientDriver ||
      result == cudaErrorStubLibrary) {
    (void)cudaGetLastError();  // Do not leave the error for an unrelated later check to find.
    return 0;
  }
  RETURN_IF_ERROR(CudaStatus(result, "cudaGetDeviceCount"));
  return count;
}

std::string DeviceInfo::ArchFlag() const { return absl::StrCat("sm_", cc_major, cc_minor); }

absl::StatusOr<DeviceInfo> UseDevice(int ordinal) {
  ASSIGN_OR_RETURN(int count, VisibleDeviceCount());
  if (count == 0) return absl::FailedPreconditionError("no CUDA device visible");
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", ordinal, " does not exist; ", count, " visible"));
  }
  const std::string context = absl::StrCat("device ", ordinal);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal), context);
  // Creates the primary context now, which the driver API (module loads) needs to be current.
  CUDA_RETURN_IF_ERROR(cudaFree(nullptr), context);

  cudaDeviceProp props;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, ordinal), context);
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = props.name;
  info.cc_major = props.major;
  info.cc_minor = props.minor;
  info.sm_count = props.multiProcessorCount;
  info.total_memory = static_cast<int64_t>(props.totalGlobalMem);
  info.max_shared_per_block = static_cast<int64_t>(props.sharedMemPerBlockOptin);
  return info;
}

absl::StatusOr<int64_t> DeviceMemoryInUse() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "device memory in use");
  return static_cast<int64_t>(total_bytes - free_bytes);
}

absl::StatusOr<const DriverApi*> Driver() {
  // Thread-safe one-time initialisation; a failure is kept, as retrying cannot make a driver.
  static const absl::StatusOr<DriverApi>* const api =
      new absl::StatusOr<DriverApi>(ResolveDriver());
  if (!api->ok()) return api->status();
  return &api->value();
}

}  // namespace reprise::runtime
