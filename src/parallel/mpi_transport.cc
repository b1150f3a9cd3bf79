// MpiDataParallel: the rendezvous (rendezvous.h) over MPI, when reprise is built with it
// (REPRISE_HAVE_MPI); otherwise it says how to get it.
#include "reprise/data_parallel.h"

#if defined(REPRISE_HAVE_MPI)
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/parallel/rendezvous.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#endif

namespace reprise {

#if defined(REPRISE_HAVE_MPI)
namespace {

absl::Status MpiStatus(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(
      absl::StrCat("data parallel: ", call, " failed: ", std::string(text, length)));
}

class MpiTransport : public parallel::RendezvousTransport {
 public:
  MpiTransport(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status BroadcastFromRoot(void* data, int64_t bytes) override {
    return MpiStatus(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD),
                     "MPI_Bcast");
  }
  absl::Status AllGather(const void* data, int64_t bytes, void* out) override {
    return MpiStatus(MPI_Allgather(data, static_cast<int>(bytes), MPI_BYTE, out,
                                   static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD),
                     "MPI_Allgather");
  }

 private:
  int rank_, size_;
};

}  // namespace

absl::StatusOr<MpiRank> MpiDataParallel() {
  int initialized = 0;
  RETURN_IF_ERROR(MpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  if (!initialized) RETURN_IF_ERROR(MpiStatus(MPI_Init(nullptr, nullptr), "MPI_Init"));
  int rank = 0, size = 1;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    return absl::InternalError("data parallel: gethostname failed");
  }
  ASSIGN_OR_RETURN(const int devices, runtime::VisibleDeviceCount());
  MpiTransport transport(rank, size);
  return parallel::Rendezvous(transport, {.host_name = host,
                                          .visible_devices = devices,
                                          .new_id = [] { return NewDataParallelId(); }});
}

#else

absl::StatusOr<MpiRank> MpiDataParallel() {
  return absl::UnimplementedError(
      "MpiDataParallel: reprise was built without MPI; install Open MPI (libopenmpi-dev) and "
      "configure with -DREPRISE_WITH_MPI=ON, or drive all local GPUs from one process with "
      "reprise::LocalDataParallel");
}

#endif

}  // namespace reprise
