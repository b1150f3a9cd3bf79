// Which GPU the engine runs on, and the few CUDA driver-API functions it needs.
//
// Driver functions are looked up through the runtime (cudaGetDriverEntryPointByVersion) rather
// than linked, so no binary of ours needs libcuda.so.1 to start: the CPU tests run on machines
// without a driver, and VisibleDeviceCount() simply answers 0 there.
#ifndef REPRISE_SRC_RUNTIME_DEVICE_H_
#define REPRISE_SRC_RUNTIME_DEVICE_H_

#include <cuda.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace reprise::runtime {

// Number of CUDA devices this process may use; 0 (not an error) without a driver or a device.
absl::StatusOr<int> VisibleDeviceCount();

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t total_memory = 0;          // Bytes.
  int64_t max_shared_per_block = 0;  // Dynamic shared memory one block may opt in to, bytes.

  // The NVRTC target for this device, e.g. "sm_90".
  std::string ArchFlag() const;
};

// Makes `ordinal` the calling thread's device and initialises its primary context, so that
// driver-API calls (module loads, cuLaunchKernel) work afterwards. Errors: kInvalidArgument for
// an ordinal out of range, kFailedPrecondition without a driver or device.
absl::StatusOr<DeviceInfo> UseDevice(int ordinal);

// Bytes of the current device's memory in use by anyone (total - free); for leak tests.
absl::StatusOr<int64_t> DeviceMemoryInUse();

// Driver-API entry points with the ABI of the CUDA version we were built against.
struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name;
  decltype(&::cuGetErrorString) get_error_string;
  decltype(&::cuModuleLoadData) module_load_data;
  decltype(&::cuModuleGetFunction) module_get_function;
  decltype(&::cuModuleUnload) module_unload;
  decltype(&::cuLaunchKernel) launch_kernel;
  decltype(&::cuLaunchKernelEx) launch_kernel_ex;  // Cooperative and cluster launches.
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor) occupancy_max_active_blocks;
  decltype(&::cuOccupancyMaxActiveClusters) occupancy_max_active_clusters;
  decltype(&::cuFuncSetAttribute) func_set_attribute;
  // Virtual memory management (src/runtime/lane_workspaces.h).
  decltype(&::cuMemAddressReserve) mem_address_reserve;
  decltype(&::cuMemAddressFree) mem_address_free;
  decltype(&::cuMemCreate) mem_create;
  decltype(&::cuMemRelease) mem_release;
  decltype(&::cuMemMap) mem_map;
  decltype(&::cuMemUnmap) mem_unmap;
  decltype(&::cuMemSetAccess) mem_set_access;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity;
};

// Resolved once per process. kFailedPrecondition when there is no usable driver.
absl::StatusOr<const DriverApi*> Driver();

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_DEVICE_H_
