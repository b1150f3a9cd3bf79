// A device, its kernel store, a stream, a lane workspace and the lane's tickets: what a test needs
// to call an op's launchers directly (src/ops/*.h Lower... functions) without a trainer.
#ifndef REPRISE_TESTS_GPU_LAUNCHER_GPU_H_
#define REPRISE_TESTS_GPU_LAUNCHER_GPU_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/lane_workspaces.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::testing {

struct LauncherGpu {
  runtime::DeviceInfo device;
  std::unique_ptr<runtime::KernelStore> kernels;
  runtime::Stream stream;
  runtime::DeviceBuffer workspace;
  runtime::DeviceBuffer tickets;  // Zeroed, as runtime::LaneWorkspaces' are.
  static constexpr int64_t kTicketWords = runtime::LaneWorkspaces::kTicketWords;

  ops::LoweringContext Context() const {
    ops::LoweringContext ctx;
    ctx.kernels = kernels.get();
    ctx.device = &device;
    ctx.workspace = workspace.data();
    ctx.workspace_bytes = workspace.bytes();
    ctx.tickets = static_cast<unsigned*>(tickets.data());
    ctx.ticket_words = kTicketWords;
    return ctx;
  }
};

// Device 0 with a 64 MiB workspace and zeroed tickets.
inline absl::StatusOr<LauncherGpu> StartLauncherGpu() {
  ASSIGN_OR_RETURN(runtime::DeviceInfo device, runtime::UseDevice(0));
  auto kernels = std::make_unique<runtime::KernelStore>(device.ArchFlag());
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  ASSIGN_OR_RETURN(runtime::DeviceBuffer workspace, runtime::DeviceBuffer::Create(64 << 20));
  const size_t ticket_bytes = LauncherGpu::kTicketWords * sizeof(unsigned);
  ASSIGN_OR_RETURN(runtime::DeviceBuffer tickets, runtime::DeviceBuffer::Create(ticket_bytes));
  CUDA_RETURN_IF_ERROR(cudaMemset(tickets.data(), 0, ticket_bytes), "zeroing the tickets");
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "zeroing the tickets");
  return LauncherGpu{std::move(device), std::move(kernels), std::move(stream), std::move(workspace),
                     std::move(tickets)};
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_LAUNCHER_GPU_H_
