// Data parallelism over the GPUs of one host from one process, no launcher needed: one Trainer per
// GPU, each driven by a thread of its own, averaging gradients with NCCL inside each rank's
// captured step (reprise/data_parallel.h).
//
//   ASSIGN_OR_RETURN(auto dp, reprise::LocalDataParallel::Create(graph, loss, options));
//   for (...) {
//     RETURN_IF_ERROR(dp->ForEachRank([&](int rank, reprise::Trainer& t) {
//       return t.SetInput("features", shard(rank));  // Each rank's slice of the global batch.
//     }));
//     RETURN_IF_ERROR(dp->Step());
//   }
#ifndef REPRISE_INCLUDE_REPRISE_LOCAL_DATA_PARALLEL_H_
#define REPRISE_INCLUDE_REPRISE_LOCAL_DATA_PARALLEL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reprise/trainer.h"

namespace reprise {

class LocalDataParallel {
 public:
  // One rank per GPU on GPUs 0 .. gpus - 1 (gpus = 0: every visible GPU), each a Trainer of
  // `graph` with `options` (its data_parallel's bucket_bytes, if set, is kept; rank, world size,
  // id, device and abort are set here), created on its rank's thread at once. FailedPrecondition
  // when no GPU is visible or fewer than `gpus`. When a rank's Trainer fails, the others stop
  // waiting for it at once (DataParallelAbort) and the failed rank's error is returned, naming it.
  static absl::StatusOr<std::unique_ptr<LocalDataParallel>> Create(const Graph& graph, Value loss,
                                                                   const TrainOptions& options,
                                                                   int gpus = 0);
  ~LocalDataParallel();
  LocalDataParallel(const LocalDataParallel&) = delete;
  LocalDataParallel& operator=(const LocalDataParallel&) = delete;

  int world_size() const;
  // Rank `rank`'s trainer. Call its methods through ForEachRank (its own thread, its GPU current);
  // reading stats() or names from any thread is fine.
  Trainer& trainer(int rank);

  // Runs fn(rank, trainer) for every rank at once, each on its rank's thread, and waits for all.
  // Returns the first error by rank. Collectives (Step, Verify, SetParameter) must be called on
  // every rank alike.
  absl::Status ForEachRank(const std::function<absl::Status(int rank, Trainer& trainer)>& fn);
  absl::Status Step();         // Trainer::Step() on every rank.
  absl::Status Synchronize();  // Trainer::Synchronize() on every rank.

  class Workers;

 private:
  explicit LocalDataParallel(std::unique_ptr<Workers> workers);
  std::unique_ptr<Workers> workers_;
  std::vector<std::unique_ptr<Trainer>> trainers_;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_LOCAL_DATA_PARALLEL_H_
