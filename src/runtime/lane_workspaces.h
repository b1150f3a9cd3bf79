// The lanes' workspaces (cuBLASLt, cuDNN and the tiled batch norm's scratch), backed by device
// memory only as far as the algorithms chosen for them need.
//
// Each lane owns a reserved virtual range of `reserve_bytes`: the most one algorithm may ask for
// while algorithms are chosen. Physical memory is mapped in granules from the start of a range.
// Choosing by heuristics reads no workspace, so nothing needs to be mapped then; choosing by
// measurement runs the candidates in it (MapAll first). After lowering, Settle maps what the
// chosen algorithms need and releases the rest: a lane that runs only our kernels costs nothing,
// and a cuDNN lane costs its largest chosen algorithm, not the reserve.
//
// Each lane also has kTicketWords tickets: words, always backed, zero at Create, on which a kernel
// may count its blocks' arrivals (the tiled batch norms' finalize in their last blocks) if it
// leaves them zero. A lane's launches run one after another, so they share its tickets.
#ifndef REPRISE_SRC_RUNTIME_LANE_WORKSPACES_H_
#define REPRISE_SRC_RUNTIME_LANE_WORKSPACES_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/runtime/owners.h"

namespace reprise::runtime {

class LaneWorkspaces {
 public:
  // Reserves `lanes` ranges of `reserve_bytes` (rounded up to the allocation granule) on the
  // current device; maps nothing yet. kFailedPrecondition without a driver.
  static absl::StatusOr<std::unique_ptr<LaneWorkspaces>> Create(int lanes, size_t reserve_bytes);
  ~LaneWorkspaces();
  LaneWorkspaces(const LaneWorkspaces&) = delete;
  LaneWorkspaces& operator=(const LaneWorkspaces&) = delete;

  int lanes() const { return static_cast<int>(mapped_.size()); }
  size_t reserve_bytes() const { return reserve_; }
  void* lane(int i) const;  // The start of lane i's range (null for a lane out of range).

  static constexpr int64_t kTicketWords = 4096;
  unsigned* tickets(int i) const;  // Lane i's tickets (null for a lane out of range).
  int64_t ticket_bytes() const;    // Over all lanes.

  // Backs every range entirely (for measuring algorithms in them). kResourceExhausted as
  // cudaMalloc.
  absl::Status MapAll();
  // `needs[i]`: the bytes lane i's launches use. Raises each lane's high-water mark (the most any
  // user of these workspaces has asked for), maps up to it and releases what lies beyond, after
  // waiting for the device when something is released. kInvalidArgument for more needs than lanes
  // or a need above the reserve.
  absl::Status Settle(absl::Span<const size_t> needs);
  int64_t mapped_bytes() const;                  // Over all lanes.
  std::vector<int64_t> mapped_per_lane() const;  // Bytes backed per lane.

 private:
  LaneWorkspaces() = default;
  absl::Status MapUpTo(int lane, size_t granules);
  absl::Status UnmapFrom(int lane, size_t granules);

  int device_ = 0;
  CUdeviceptr base_ = 0;
  size_t granule_ = 0, reserve_ = 0;
  std::vector<std::vector<CUmemGenericAllocationHandle>> mapped_;  // Per lane, in address order.
  std::vector<size_t> high_water_;                                 // Bytes, per lane.
  std::optional<DeviceBuffer> tickets_;                            // kTicketWords per lane.
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_LANE_WORKSPACES_H_
