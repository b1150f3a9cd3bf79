// MpiDataParallel: the rendezvous (rendezvous.h) over MPI, when reprise is built with it
// (REPRISE_HAVE_MPI); otherwise it says how to get it.
#include "reprise/data_parallel.h"

#if defined(REPRISE_HAVE_MPI)
#include <mpi.h>
#include <unistd.h>

#include <atomic>
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

// Whether MpiDataParallel called MPI_Init (and so MpiFinalize owes MPI_Finalize).
std::atomic<bool> initialized_here{false};

}  // namespace

absl::StatusOr<MpiRank> MpiDataParallel() {
  int initialized = 0;
  RETURN_IF_ERROR(MpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  if (!initialized) {
    RETURN_IF_ERROR(MpiStatus(MPI_Init(nullptr, nullptr), "MPI_Init"));
    initialized_here = true;
    // MPI's errors come back as Status rather than ending the process.
    RETURN_IF_ERROR(MpiStatus(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                              "MPI_Comm_set_errhandler"));
  }
  int rank = 0, size = 1;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  // What fails here still goes to the rendezvous, which fails every rank with it.
  parallel::RendezvousOptions options{.new_id = [] { return NewDataParallelId(); }};
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    options.host_name = host;
  } else {
    options.local_error = absl::InternalError("gethostname failed");
  }
  if (absl::StatusOr<int> devices = runtime::VisibleDeviceCount(); devices.ok()) {
    options.visible_devices = *devices;
  } else if (options.local_error.ok()) {
    options.local_error = devices.status();
  }
  MpiTransport transport(rank, size);
  return parallel::Rendezvous(transport, options);
}

absl::Status MpiFinalize() {
  if (!initialized_here.exchange(false)) return absl::OkStatus();
  int finalized = 0;
  RETURN_IF_ERROR(MpiStatus(MPI_Finalized(&finalized), "MPI_Finalized"));
  if (finalized) return absl::OkStatus();
  return MpiStatus(MPI_Finalize(), "MPI_Finalize");
}

#else

absl::StatusOr<MpiRank> MpiDataParallel() {
  return absl::UnimplementedError(
      "MpiDataParallel: reprise was built without MPI; install Open MPI (libopenmpi-dev) and "
      "configure with -DREPRISE_WITH_MPI=ON, or drive all local GPUs from one process with "
      "reprise::LocalDataParallel");
}

absl::Status MpiFinalize() { return absl::OkStatus(); }

#endif

}  // namespace reprise
