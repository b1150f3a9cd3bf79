// Trainer::Impl's data-parallel start: join the job, check every rank runs the same step, take
// rank 0's weights, and warm up the collectives before capture.
#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/ir/op_def.h"
#include "src/parallel/data_parallel_step.h"
#include "src/parallel/model_check.h"
#include "src/parallel/nccl_communicator.h"
#include "src/parallel/rank_wait.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::Status Trainer::Impl::StartDataParallel() {
  if (!options_.parallel.data_parallel.has_value()) return absl::OkStatus();
  const DataParallel& dp = *options_.parallel.data_parallel;
  ASSIGN_OR_RETURN(communicator_,
                   parallel::NcclCommunicator::Create(dp.id, dp.rank, dp.world_size,
                                                      options_.device, parallel::RankWait(dp)));
  cudaStream_t stream = stream_->get();
  RETURN_IF_ERROR(parallel::CheckSameStepOnEveryRank(
      *communicator_, parallel::StepDigest(model_fingerprint_, data_parallel_buckets_), stream));
  // The persistent region before the inputs: parameters, optimizer state, constants, kept values.
  RETURN_IF_ERROR(communicator_->Broadcast(arena_->data(), plan_.memory.input_offset, 0, stream,
                                           "taking rank 0's parameters"));
  return communicator_->WaitForStream(stream, "taking rank 0's parameters");
}

absl::Status Trainer::Impl::WarmUpCollectives() {
  if (communicator_ == nullptr) return absl::OkStatus();
  // NCCL connects a communicator's peers on its first collectives of each size and kind: make
  // those calls eagerly, on the transient gradients (nothing reads their results), so that
  // capture records transfers only.
  cudaStream_t stream = stream_->get();
  for (size_t i = 0; i < plan_.launches.size(); ++i) {
    if (plan_.graph().node(plan_.launches[i].node).op->kind != ir::OpKind::kCommunication) continue;
    RETURN_IF_ERROR(launches_[i + 1].kernel->Launch(stream));  // Launch 0 is the input copy.
  }
  return communicator_->WaitForStream(stream, "warming up the data-parallel collectives");
}

}  // namespace reprise
