#include "src/runtime/lane_workspaces.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace {

constexpr char kWhat[] = "lane workspaces";

CUmemAllocationProp DeviceMemoryOf(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

size_t RoundUp(size_t bytes, size_t granule) { return (bytes + granule - 1) / granule * granule; }

}  // namespace

absl::StatusOr<std::unique_ptr<LaneWorkspaces>> LaneWorkspaces::Create(int lanes,
                                                                       size_t reserve_bytes) {
  if (lanes < 1) return absl::InvalidArgumentError(absl::StrCat(kWhat, ": lanes must be >= 1"));
  ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  std::unique_ptr<LaneWorkspaces> w(new LaneWorkspaces());
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&w->device_), kWhat);
  const CUmemAllocationProp prop = DeviceMemoryOf(w->device_);
  CUDA_RETURN_IF_ERROR(
      api->mem_get_allocation_granularity(&w->granule_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      kWhat);
  w->reserve_ = RoundUp(std::max<size_t>(reserve_bytes, 1), w->granule_);
  CUDA_RETURN_IF_ERROR(api->mem_address_reserve(&w->base_, w->reserve_ * lanes, 0, 0, 0), kWhat);
  w->mapped_.resize(lanes);
  w->high_water_.assign(lanes, 0);
  const size_t ticket_bytes = static_cast<size_t>(lanes * kTicketWords) * sizeof(unsigned);
  ASSIGN_OR_RETURN(w->tickets_, DeviceBuffer::Create(ticket_bytes));
  CUDA_RETURN_IF_ERROR(cudaMemset(w->tickets_->data(), 0, ticket_bytes), kWhat);
  // On the legacy stream, which the engine's streams do not wait for.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy), kWhat);
  return w;
}

LaneWorkspaces::~LaneWorkspaces() {
  if (base_ == 0) return;
  absl::StatusOr<const DriverApi*> api = Driver();
  if (!api.ok()) return;
  // Unmapping does not wait for work still queued on the device (cudaFree did); this does.
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(device_) == cudaSuccess) {
    (void)cudaDeviceSynchronize();
    (void)cudaSetDevice(current);
  }
  (void)cudaGetLastError();
  for (int lane = 0; lane < lanes(); ++lane) (void)UnmapFrom(lane, 0);
  (void)(*api)->mem_address_free(base_, reserve_ * lanes());
}

void* LaneWorkspaces::lane(int i) const {
  if (i < 0 || i >= lanes()) return nullptr;
  return reinterpret_cast<void*>(base_ + static_cast<CUdeviceptr>(i) * reserve_);
}

unsigned* LaneWorkspaces::tickets(int i) const {
  if (i < 0 || i >= lanes()) return nullptr;
  return static_cast<unsigned*>(tickets_->data()) + i * kTicketWords;
}

int64_t LaneWorkspaces::ticket_bytes() const { return static_cast<int64_t>(tickets_->bytes()); }

absl::Status LaneWorkspaces::MapUpTo(int lane, size_t granules) {
  ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  const CUmemAllocationProp prop = DeviceMemoryOf(device_);
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle>& handles = mapped_[lane];
  while (handles.size() < granules) {
    const CUdeviceptr at =
        reinterpret_cast<CUdeviceptr>(this->lane(lane)) + handles.size() * granule_;
    CUmemGenericAllocationHandle handle = 0;
    CUDA_RETURN_IF_ERROR(api->mem_create(&handle, granule_, &prop, 0),
                         absl::StrCat(kWhat, ": backing lane ", lane));
    if (absl::Status mapped = CudaStatus(api->mem_map(at, granule_, 0, handle, 0), "cuMemMap",
                                         absl::StrCat(kWhat, ": lane ", lane));
        !mapped.ok()) {
      (void)api->mem_release(handle);
      return mapped;
    }
    handles.push_back(handle);
    CUDA_RETURN_IF_ERROR(api->mem_set_access(at, granule_, &access, 1),
                         absl::StrCat(kWhat, ": lane ", lane));
  }
  return absl::OkStatus();
}

absl::Status LaneWorkspaces::UnmapFrom(int lane, size_t granules) {
  ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  std::vector<CUmemGenericAllocationHandle>& handles = mapped_[lane];
  while (handles.size() > granules) {
    const CUdeviceptr at =
        reinterpret_cast<CUdeviceptr>(this->lane(lane)) + (handles.size() - 1) * granule_;
    CUDA_RETURN_IF_ERROR(api->mem_unmap(at, granule_), absl::StrCat(kWhat, ": lane ", lane));
    CUDA_RETURN_IF_ERROR(api->mem_release(handles.back()), absl::StrCat(kWhat, ": lane ", lane));
    handles.pop_back();
  }
  return absl::OkStatus();
}

absl::Status LaneWorkspaces::MapAll() {
  for (int lane = 0; lane < lanes(); ++lane) {
    RETURN_IF_ERROR(MapUpTo(lane, reserve_ / granule_));
  }
  return absl::OkStatus();
}

absl::Status LaneWorkspaces::Settle(absl::Span<const size_t> needs) {
  if (static_cast<int>(needs.size()) > lanes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": ", needs.size(), " lanes' needs for ", lanes(), " lanes"));
  }
  for (size_t lane = 0; lane < needs.size(); ++lane) {
    if (needs[lane] > reserve_) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, ": lane ", lane, " needs ", needs[lane],
                                                     " bytes, above its reserve of ", reserve_));
    }
    high_water_[lane] = std::max(high_water_[lane], needs[lane]);
  }
  bool releases = false;
  for (int lane = 0; lane < lanes(); ++lane) {
    releases = releases || mapped_[lane].size() * granule_ > RoundUp(high_water_[lane], granule_);
  }
  // Measured algorithms may still run in what is about to be released.
  if (releases) CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), kWhat);
  for (int lane = 0; lane < lanes(); ++lane) {
    const size_t granules = RoundUp(high_water_[lane], granule_) / granule_;
    RETURN_IF_ERROR(UnmapFrom(lane, granules));
    RETURN_IF_ERROR(MapUpTo(lane, granules));
  }
  return absl::OkStatus();
}

int64_t LaneWorkspaces::mapped_bytes() const {
  int64_t bytes = 0;
  for (int64_t b : mapped_per_lane()) bytes += b;
  return bytes;
}

std::vector<int64_t> LaneWorkspaces::mapped_per_lane() const {
  std::vector<int64_t> out;
  for (const auto& handles : mapped_)
    out.push_back(static_cast<int64_t>(handles.size() * granule_));
  return out;
}

}  // namespace reprise::runtime
