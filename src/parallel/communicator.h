// Communicator: the collectives data-parallel training needs across the ranks of one job. The
// all_reduce launches of a plan (src/ops/all_reduce.h) call it, and a CUDA graph may capture those
// calls; the Trainer calls it at creation to check the model and broadcast the parameters.
// Implementations: NCCL (nccl_communicator.h) and an in-process fake over host memory for CPU
// tests (fake_communicator.h). A call that waits for the other ranks gives up as RankWait says
// (rank_wait.h): promptly when another rank of the process failed, else after the timeout; the
// communicator is then aborted, and every later call fails.
#ifndef REPRISE_SRC_PARALLEL_COMMUNICATOR_H_
#define REPRISE_SRC_PARALLEL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "reprise/tensor.h"

namespace reprise::parallel {

class Communicator {
 public:
  enum class Memory : uint8_t {
    kDevice,  // The buffers are device memory of this rank's GPU (NCCL).
    kHost,    // The buffers are host memory (the fake); streams are ignored.
  };

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Memory memory() const = 0;

  // recv = (Σ over ranks of send) / world_size, elementwise over `count` elements of `dtype`
  // (f32, bf16 or f16); `send` may be `recv`. Enqueued on `stream`, capturable. Every rank calls
  // the collectives in the same order with the same counts. Errors name `what`.
  virtual absl::Status AllReduceAverage(const void* send, void* recv, int64_t count, DType dtype,
                                        cudaStream_t stream, absl::string_view what) = 0;
  // Every rank's `bytes` at `data` become rank `root`'s.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root, cudaStream_t stream,
                                 absl::string_view what) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's `bytes` at `send`, on every rank.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t bytes, cudaStream_t stream,
                                 absl::string_view what) = 0;
  // Waits until `stream` has run everything enqueued on it, collectives included (not while it is
  // being captured). Not a collective itself, but what it waits for may wait for the other ranks.
  virtual absl::Status WaitForStream(cudaStream_t stream, absl::string_view what) = 0;
};

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_COMMUNICATOR_H_
