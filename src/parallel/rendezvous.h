// How the ranks of a job started by a launcher (mpirun) find each other. The launcher's own channel
// (a RendezvousTransport) carries only NCCL's unique id, from rank 0 to every rank, and each rank's
// host name and GPU count, from which each rank's GPU follows: its index among the ranks on its
// host. NCCL then moves all the data. The logic is host-only, tested with a fake transport; the MPI
// transport (mpi_transport.cc) exists when reprise is built with MPI.
#ifndef REPRISE_SRC_PARALLEL_RENDEZVOUS_H_
#define REPRISE_SRC_PARALLEL_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reprise/data_parallel.h"

namespace reprise::parallel {

class RendezvousTransport {
 public:
  virtual ~RendezvousTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The `bytes` at `data` on every rank become rank 0's.
  virtual absl::Status BroadcastFromRoot(void* data, int64_t bytes) = 0;
  // out[r * bytes, (r + 1) * bytes) = rank r's `bytes` at `data`, on every rank.
  virtual absl::Status AllGather(const void* data, int64_t bytes, void* out) = 0;
};

struct RendezvousOptions {
  std::string host_name;    // This rank's host (ranks with the same name share its GPUs).
  int visible_devices = 0;  // GPUs this rank sees.
  // Why this rank cannot take part (e.g. CUDA could not count its GPUs), if it cannot: it still
  // meets the others, so that every rank fails with this message instead of waiting for it.
  absl::Status local_error;
  int64_t bucket_bytes = int64_t{25} << 20;
  // Makes the job's id on rank 0 (NewDataParallelId in a real job).
  std::function<absl::StatusOr<DataParallelId>()> new_id;
};

// Every rank's DataParallel and GPU. Fails on every rank alike: FailedPrecondition when a rank has
// a local_error (naming the rank and its host, the first such rank's message), when a host runs
// more ranks than it has GPUs (naming the host and both counts), or when rank 0 could not make the
// id (with its message). A host name longer than 255 bytes is cut to 255. The transport's errors
// pass through.
absl::StatusOr<MpiRank> Rendezvous(RendezvousTransport& transport,
                                   const RendezvousOptions& options);

}  // namespace reprise::parallel

#endif  // REPRISE_SRC_PARALLEL_RENDEZVOUS_H_
