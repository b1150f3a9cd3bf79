// Data-parallel training across GPUs: each rank (one GPU) holds a full replica of the model and
// reads its own slice of the global batch; the gradients are averaged over the ranks by NCCL
// all-reduces inside the step's CUDA graph, bucket by bucket as the backward pass makes them, so
// communication overlaps the rest of the backward pass and each bucket's optimizer update runs
// when its all-reduce ends.
//
// One rank per process (e.g. launched by mpirun, see MpiDataParallel) or all of a host's GPUs in
// one process (reprise/local_data_parallel.h). With one process per rank:
//
//   reprise::TrainOptions options;
//   options.parallel.data_parallel = reprise::DataParallel{.rank = rank, .world_size = size, .id =
//   id}; options.device = local_rank; ASSIGN_OR_RETURN(auto trainer,
//   reprise::Trainer::Create(graph, loss, options));
//
// where rank 0 made `id` with NewDataParallelId() and every rank received it (any transport).
#ifndef REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_
#define REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reprise {

// Names one data-parallel job: NCCL's unique id as 128 opaque bytes. Made once (on rank 0) and
// handed to every rank.
struct DataParallelId {
  std::array<char, 128> bytes{};
};

// A new id (ncclGetUniqueId: it opens rank 0's bootstrap socket). Internal when NCCL fails.
absl::StatusOr<DataParallelId> NewDataParallelId();

// Lets the ranks of one process stop waiting for each other as soon as one of them fails: give
// every rank's DataParallel the same one (LocalDataParallel does). A rank whose Trainer::Create
// fails records why here; the others' waits for their peers (NCCL's setup, the model check, taking
// rank 0's parameters, the first collectives) then end at once, each Create returning Aborted with
// the failed rank and its error, instead of at DataParallel::timeout. Thread-safe.
class DataParallelAbort {
 public:
  struct Failure {
    int rank;
    absl::Status error;
  };
  // Records that `rank` failed with `error` (not OK), unless a failure is recorded already.
  void Fail(int rank, absl::Status error);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The first failure recorded, if any.
  std::optional<Failure> failure() const;

 private:
  std::atomic<bool> failed_{false};
  mutable absl::Mutex mu_;
  std::optional<Failure> failure_ ABSL_GUARDED_BY(mu_);
};

// TrainOptions::parallel.data_parallel: this trainer is rank `rank` of `world_size` replicas.
struct DataParallel {
  int rank = 0;
  int world_size = 1;
  DataParallelId id;  // The same on every rank.
  // Gradients are averaged in buckets of about this many bytes (a bucket closes once it reaches
  // it), filled in the order the backward pass makes the gradients (the last layer's first).
  int64_t bucket_bytes = int64_t{25} << 20;
  // How long Trainer::Create waits for the other ranks at any one point (NCCL's setup, the model
  // check, taking rank 0's parameters, the first collectives, each of which waits for every rank)
  // before it gives up with DeadlineExceeded and aborts its NCCL communicator, so that a rank that
  // failed or never started elsewhere does not leave this one waiting forever. Generous by
  // default: the first collectives wait for every rank's kernels to compile.
  absl::Duration timeout = absl::Minutes(10);
  // Shared by the ranks of one process (see DataParallelAbort); may be null.
  std::shared_ptr<DataParallelAbort> abort;
};

// Where a process launched by mpirun stands: its rank, the job's size and id (rank 0 makes it and
// MPI broadcasts it; NCCL moves all data), and the GPU to use (the rank's index among the ranks on
// its host). Calls MPI_Init if MPI is not initialised yet (then call MpiFinalize at the end).
// Every rank fails alike: FailedPrecondition when a host runs more ranks than it has GPUs (no GPU
// at all included) or rank 0 could not make the id. Unimplemented when reprise was built without
// MPI (the CMake option REPRISE_WITH_MPI). A rank that fails later, in Trainer::Create, should end
// its process with an error: mpirun then ends the job; otherwise the other ranks give up after
// DataParallel::timeout.
//
//   ASSIGN_OR_RETURN(reprise::MpiRank me, reprise::MpiDataParallel());
//   options.parallel.data_parallel = me.data_parallel;
//   options.device = me.device;
//   ... train ...
//   RETURN_IF_ERROR(reprise::MpiFinalize());  // After every Trainer is destroyed.
struct MpiRank {
  DataParallel data_parallel;
  int device = 0;
};
absl::StatusOr<MpiRank> MpiDataParallel();

// MPI_Finalize, if MpiDataParallel initialised MPI and nobody finalised it yet; OK otherwise (and
// without MPI).
absl::Status MpiFinalize();

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_
