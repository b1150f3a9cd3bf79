// The Communicator over NCCL: one communicator per rank, its collectives enqueued on the caller's
// stream (and so captured into a CUDA graph like any kernel). Every NCCL result code becomes a
// Status naming the call, what it was for, NCCL's description and its last error message.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): its setup and each call return at
// once, possibly still in progress, and this class polls ncclCommGetAsyncError until the call is
// done (for a collective: enqueued on the stream), under a RankWait. A rank whose peer failed or
// never came therefore gets an error instead of waiting forever: the communicator is aborted
// (ncclCommAbort, which also stops its kernels waiting on the GPU) and every later call fails.
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
#include "src/parallel/rank_wait.h"

namespace reprise::parallel {

// ncclSuccess -> OK; ncclInvalidArgument, ncclInvalidUsage -> InvalidArgument; ncclRemoteError
// (a peer failed or left) -> Unavailable; anything else -> Internal. `comm` (may be null) adds
// ncclGetLastError's detail.
absl::Status NcclStatus(ncclResult_t code, absl::string_view call, absl::string_view context,
                        ncclComm_t comm = nullptr);

class NcclCommunicator : public Communicator {
 public:
  // Joins job `id` as `rank` of `world_size` on CUDA device `device` (made current): waits until
  // every rank has joined, under `wait` (whose rank is `rank`). InvalidArgument for a rank outside
  // [0, world_size); NCCL's errors; Aborted or DeadlineExceeded from `wait`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const DataParallelId& id,
                                                                  int rank, int world_size,
                                                                  int device, RankWait wait);
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
  absl::Status WaitForStream(cudaStream_t stream, absl::string_view what) override;

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, RankWait wait)
      : comm_(comm), rank_(rank), world_size_(world_size), wait_(std::move(wait)) {}
  // OK while the communicator works; else why it was aborted.
  absl::Status Usable(absl::string_view what) const;
  // Finishes a call that returned `started`: waits while it is in progress. On any error the
  // communicator is aborted.
  absl::Status Finish(ncclResult_t started, absl::string_view call, absl::string_view what);
  // ncclCommGetAsyncError: true when done, false while in progress, else the error.
  absl::StatusOr<bool> Poll(absl::string_view call, absl::string_view what);
  // Aborts the communicator (ncclCommAbort) and keeps `why` for later calls; returns `why`.
  absl::Status Abort(absl::Status why);

  ncclComm_t comm_;
  int rank_, world_size_;
  RankWait wait_;
  absl::Status aborted_;
};

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_NCCL_COMMUNICATOR_H_
