#include "src/api/settle_list.h"

#include <vector>

#include "src/util/status_macros.h"

namespace reprise {

void SettleList::Add(const void* owner, const ops::GpuKernel* kernel) {
  kernels_.emplace_back(owner, kernel);
}

void SettleList::Remove(const void* owner) {
  std::erase_if(kernels_, [owner](const auto& entry) { return entry.first == owner; });
  if (last_step_ == owner) last_step_ = nullptr;
}

absl::Status SettleList::Settle(cudaStream_t stream) const {
  for (const auto& [owner, kernel] : kernels_) RETURN_IF_ERROR(kernel->Settle(stream));
  return absl::OkStatus();
}

absl::Status SettleList::SettleCounters(cudaStream_t stream) const {
  for (const auto& [owner, kernel] : kernels_) RETURN_IF_ERROR(kernel->SettleCounters(stream));
  return absl::OkStatus();
}

absl::Status SettleList::BeforeStep(const void* owner, cudaStream_t stream) {
  if (last_step_ == owner) return absl::OkStatus();
  // Settling them all also settles this plan's own kernels, which have nothing elsewhere now.
  if (last_step_ != nullptr) RETURN_IF_ERROR(Settle(stream));
  last_step_ = owner;
  return absl::OkStatus();
}

}  // namespace reprise
