#include "src/parallel/model_check.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::parallel {

absl::Status CompareRankDigests(absl::Span<const std::string> digests) {
  std::vector<int> differ;
  for (size_t r = 1; r < digests.size(); ++r) {
    if (digests[r] != digests[0]) differ.push_back(static_cast<int>(r));
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("data parallel: rank", differ.size() > 1 ? "s " : " ",
                   absl::StrJoin(differ, ", "), differ.size() > 1 ? " build" : " builds",
                   " a different model or plan than rank 0 (the graph, loss, optimizer or "
                   "DataParallel::bucket_bytes differ): digest ",
                   digests[differ[0]], " on rank ", differ[0], ", ", digests[0], " on rank 0"));
}

absl::Status CheckSameStepOnEveryRank(Communicator& comm, const std::string& digest,
                                      cudaStream_t stream) {
  if (digest.size() != kDigestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step digest has ", kDigestBytes, " characters, got ", digest.size()));
  }
  const int world = comm.world_size();
  std::string gathered(static_cast<size_t>(kDigestBytes) * world, '\0');
  const char* what = "checking that every rank runs the same step";
  if (comm.memory() == Communicator::Memory::kHost) {
    RETURN_IF_ERROR(comm.AllGather(digest.data(), gathered.data(), kDigestBytes, stream, what));
  } else {
    ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer,
                     runtime::DeviceBuffer::Create(kDigestBytes * (world + 1)));
    char* send = static_cast<char*>(buffer.data()) + kDigestBytes * world;
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(send, digest.data(), kDigestBytes, cudaMemcpyHostToDevice, stream), what);
    RETURN_IF_ERROR(comm.AllGather(send, buffer.data(), kDigestBytes, stream, what));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(gathered.data(), buffer.data(), gathered.size(),
                                         cudaMemcpyDeviceToHost, stream),
                         what);
    RETURN_IF_ERROR(comm.WaitForStream(stream, what));
  }
  std::vector<std::string> digests;
  for (int r = 0; r < world; ++r)
    digests.push_back(gathered.substr(r * kDigestBytes, kDigestBytes));
  return CompareRankDigests(digests);
}

}  // namespace reprise::parallel
