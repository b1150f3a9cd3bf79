#include "src/parallel/nccl_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::StatusOr<DataParallelId> NewDataParallelId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(
      parallel::NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId", "a new data-parallel job"));
  static_assert(sizeof(id.internal) == sizeof(DataParallelId::bytes));
  DataParallelId out;
  std::memcpy(out.bytes.data(), id.internal, sizeof(id.internal));
  return out;
}

namespace parallel {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
    default:
      return absl::UnimplementedError(
          absl::StrCat("NCCL all-reduce of ", DTypeName(dtype), " is not supported"));
  }
}

}  // namespace

absl::Status NcclStatus(ncclResult_t code, absl::string_view call, absl::string_view context,
                        ncclComm_t comm) {
  if (code == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(context.empty() ? "" : absl::StrCat(context, ": "), call,
                                     " failed: ", ncclGetErrorString(code));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (code) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const DataParallelId& id,
                                                                           int rank, int world_size,
                                                                           int device,
                                                                           RankWait wait) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel rank ", rank, " is outside [0, ", world_size, ")"));
  }
  RETURN_IF_ERROR(runtime::UseDevice(device).status());
  ncclUniqueId unique;
  std::memcpy(unique.internal, id.bytes.data(), sizeof(unique.internal));
  const std::string context =
      absl::StrCat("joining the job as rank ", rank, " of ", world_size, " on device ", device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Setup returns at once; Finish polls it, so that it can be abandoned.
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, world_size, unique, rank, &config);
  if (comm == nullptr) return NcclStatus(started, "ncclCommInitRankConfig", context);
  auto out = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, rank, world_size, std::move(wait)));
  RETURN_IF_ERROR(out->Finish(started, "ncclCommInitRankConfig", context));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

absl::Status NcclCommunicator::Usable(absl::string_view what) const {
  if (comm_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": the NCCL communicator was aborted earlier: ", aborted_.message()));
}

absl::Status NcclCommunicator::Abort(absl::Status why) {
  if (comm_ != nullptr) {
    // Also ends this rank's collectives still waiting on the GPU for a peer that is gone.
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = why;
  }
  return why;
}

absl::StatusOr<bool> NcclCommunicator::Poll(absl::string_view call, absl::string_view what) {
  ncclResult_t state = ncclSuccess;
  RETURN_IF_ERROR(
      NcclStatus(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", what, comm_));
  if (state == ncclInProgress) return false;
  RETURN_IF_ERROR(NcclStatus(state, call, what, comm_));
  return true;
}

absl::Status NcclCommunicator::Finish(ncclResult_t started, absl::string_view call,
                                      absl::string_view what) {
  absl::Status status;
  if (started == ncclInProgress) {
    status = wait_.Until(what, [&] { return Poll(call, what); });
  } else {
    status = NcclStatus(started, call, what, comm_);
  }
  if (!status.ok()) return Abort(std::move(status));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduceAverage(const void* send, void* recv, int64_t count,
                                                DType dtype, cudaStream_t stream,
                                                absl::string_view what) {
  RETURN_IF_ERROR(Usable(what));
  ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(dtype));
  return Finish(ncclAllReduce(send, recv, static_cast<size_t>(count), type, ncclAvg, comm_, stream),
                "ncclAllReduce", what);
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t bytes, int root, cudaStream_t stream,
                                         absl::string_view what) {
  RETURN_IF_ERROR(Usable(what));
  return Finish(
      ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream),
      "ncclBroadcast", what);
}

absl::Status NcclCommunicator::AllGather(const void* send, void* recv, int64_t bytes,
                                         cudaStream_t stream, absl::string_view what) {
  RETURN_IF_ERROR(Usable(what));
  return Finish(ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_, stream),
                "ncclAllGather", what);
}

absl::Status NcclCommunicator::WaitForStream(cudaStream_t stream, absl::string_view what) {
  RETURN_IF_ERROR(Usable(what));
  absl::Status status = wait_.Until(what, [&]() -> absl::StatusOr<bool> {
    const cudaError_t query = cudaStreamQuery(stream);
    if (query == cudaSuccess) return true;
    if (query != cudaErrorNotReady) {
      return runtime::CudaStatus(query, "cudaStreamQuery", what);
    }
    // Still running: fail early if NCCL saw a peer go (a network or remote error).
    RETURN_IF_ERROR(Poll("a collective", what).status());
    return false;
  });
  if (!status.ok()) return Abort(std::move(status));
  return absl::OkStatus();
}

}  // namespace parallel
}  // namespace reprise
