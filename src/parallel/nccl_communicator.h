// The Communicator over NCCL: one communicator per rank, its collectives enqueued on the caller's
// stream (and so captured into a CUDA graph like any kernel). Every NCCL result code becomes a
// Status naming the call, what it was for, NCCL's description and its last error message.
#ifndef REPRISE_SRC_PARALLEL_NCCL_COMMUNICATOR_H_
#define REPRISE_SRC_PARALLEL_NCCL_COMMUNICATOR_H_

#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/data_parallel.h"
#include "src/parallel/communicator.h"

namespace reprise::parallel {

// ncclSuccess -> OK; ncclInvalidArgument, ncclInvalidUsage -> InvalidArgument; ncclRemoteError
// (a peer failed or left) -> Unavailable; anything else -> Internal. `comm` (may be null) adds
// ncclGetLastError's detail.
absl::Status NcclStatus(ncclResult_t code, absl::string_view call, absl::string_view context,
                        ncclComm_t comm = nullptr);

class NcclCommunicator : public Communicator {
 public:
  // Joins job `id` as `rank` of `world_size` on CUDA device `device` (made current): blocks until
  // every rank has joined (ncclCommInitRank). InvalidArgument for a rank outside [0, world_size).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const DataParallelId& id,
                                                                  int rank, int world_size,
                                                                  int device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Memory memory() const override { return Memory::kDevice; }
  absl::Status AllReduceAverage(const void* send, void* recv, int64_t count, DType dtype,
                                cudaStream_t stream, absl::string_view what) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root, cudaStream_t stream,
                         absl::string_view what) override;
  absl::Status AllGather(const void* send, void* recv, int64_t bytes, cudaStream_t stream,
                         absl::string_view what) override;

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size)
      : comm_(comm), rank_(rank), world_size_(world_size) {}
  ncclComm_t comm_;
  int rank_, world_size_;
};

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_NCCL_COMMUNICATOR_H_
