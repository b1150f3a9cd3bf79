#include "src/ops/kernel_timing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<std::vector<double>> TimeKernelsInTurns(absl::Span<const GpuKernel* const> kernels,
                                                       const KernelTimingOptions& options,
                                                       absl::string_view what) {
  if (kernels.empty() || options.launches_per_round < 1 || options.rounds < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": timing needs kernels, and at least one launch a round and one round"));
  }
  cudaStream_t stream = cudaStreamPerThread;
  for (const GpuKernel* kernel : kernels) RETURN_IF_ERROR(kernel->Launch(stream));
  const size_t count = kernels.size();
  std::vector<runtime::Event> starts, stops;
  for (size_t k = 0; k < count * options.rounds; ++k) {
    ASSIGN_OR_RETURN(runtime::Event start, runtime::Event::Create(cudaEventDefault));
    ASSIGN_OR_RETURN(runtime::Event stop, runtime::Event::Create(cudaEventDefault));
    starts.push_back(std::move(start));
    stops.push_back(std::move(stop));
  }
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t k = 0; k < count; ++k) {
      const size_t at = round * count + k;
      CUDA_RETURN_IF_ERROR(cudaEventRecord(starts[at].get(), stream), what);
      for (int launch = 0; launch < options.launches_per_round; ++launch) {
        RETURN_IF_ERROR(kernels[k]->Launch(stream));
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stops[at].get(), stream), what);
    }
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
  std::vector<double> medians;
  for (size_t k = 0; k < count; ++k) {
    std::vector<float> per_launch;
    for (int round = 0; round < options.rounds; ++round) {
      ASSIGN_OR_RETURN(float ms,
                       runtime::ElapsedMs(starts[round * count + k], stops[round * count + k]));
      per_launch.push_back(ms / options.launches_per_round);
    }
    std::sort(per_launch.begin(), per_launch.end());
    medians.push_back(per_launch[per_launch.size() / 2]);
  }
  return medians;
}

}  // namespace reprise::ops
