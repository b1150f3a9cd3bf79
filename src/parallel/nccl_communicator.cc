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
                                                                           int device) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel rank ", rank, " is outside [0, ", world_size, ")"));
  }
  RETURN_IF_ERROR(runtime::UseDevice(device).status());
  ncclUniqueId unique;
  std::memcpy(unique.internal, id.bytes.data(), sizeof(unique.internal));
  ncclComm_t comm = nullptr;
  RETURN_IF_ERROR(
      NcclStatus(ncclCommInitRank(&comm, world_size, unique, rank), "ncclCommInitRank",
                 absl::StrCat("rank ", rank, " of ", world_size, " on device ", device)));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, world_size));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

absl::Status NcclCommunicator::AllReduceAverage(const void* send, void* recv, int64_t count,
                                                DType dtype, cudaStream_t stream,
                                                absl::string_view what) {
  ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(dtype));
  return NcclStatus(
      ncclAllReduce(send, recv, static_cast<size_t>(count), type, ncclAvg, comm_, stream),
      "ncclAllReduce", what, comm_);
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t bytes, int root, cudaStream_t stream,
                                         absl::string_view what) {
  return NcclStatus(
      ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream),
      "ncclBroadcast", what, comm_);
}

absl::Status NcclCommunicator::AllGather(const void* send, void* recv, int64_t bytes,
                                         cudaStream_t stream, absl::string_view what) {
  return NcclStatus(ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_, stream),
                    "ncclAllGather", what, comm_);
}

}  // namespace parallel
}  // namespace reprise
