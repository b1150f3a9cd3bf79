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
//   options.data_parallel = reprise::DataParallel{.rank = rank, .world_size = size, .id = id};
//   options.device = local_rank;
//   ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(graph, loss, options));
//
// where rank 0 made `id` with NewDataParallelId() and every rank received it (any transport).
#ifndef REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_
#define REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"

namespace reprise {

// Names one data-parallel job: NCCL's unique id as 128 opaque bytes. Made once (on rank 0) and
// handed to every rank.
struct DataParallelId {
  std::array<char, 128> bytes{};
};

// A new id (ncclGetUniqueId: it opens rank 0's bootstrap socket). Internal when NCCL fails.
absl::StatusOr<DataParallelId> NewDataParallelId();

// TrainOptions::data_parallel: this trainer is rank `rank` of `world_size` replicas.
struct DataParallel {
  int rank = 0;
  int world_size = 1;
  DataParallelId id;  // The same on every rank.
  // Gradients are averaged in buckets of about this many bytes (a bucket closes once it reaches
  // it), filled in the order the backward pass makes the gradients (the last layer's first).
  int64_t bucket_bytes = int64_t{25} << 20;
};

// Where a process launched by mpirun stands: its rank, the job's size and id (rank 0 makes it and
// MPI broadcasts it; NCCL moves all data), and the GPU to use (the rank's index among the ranks on
// its host). Calls MPI_Init if MPI is not initialised yet; the caller calls MPI_Finalize at the
// end. FailedPrecondition when a host runs more ranks than it has GPUs; Unimplemented when reprise
// was built without MPI (the CMake option REPRISE_WITH_MPI).
struct MpiRank {
  DataParallel data_parallel;
  int device = 0;
};
absl::StatusOr<MpiRank> MpiDataParallel();

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_DATA_PARALLEL_H_
