#include "src/api/initial_upload.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "src/ir/initializer.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {

InitialUpload::~InitialUpload() {
  for (int i = 0; i < 2; ++i) {
    if (recorded_[i]) (void)cudaEventSynchronize(copied_[i]->get());
  }
}

absl::Status InitialUpload::Upload(const Initializer& init, uint64_t seed, const std::string& name,
                                   int64_t elements, char* device, util::PhaseTimer& phases) {
  const std::string context = absl::StrCat("initialising '", name, "'");
  if (!pinned_.has_value()) {
    ASSIGN_OR_RETURN(pinned_, runtime::PinnedBuffer::Create(2 * kPieceElements * sizeof(float)));
    for (std::optional<runtime::Event>& event : copied_) {
      ASSIGN_OR_RETURN(event, runtime::Event::Create());
    }
  }
  for (int64_t first = 0; first < elements; first += kPieceElements) {
    const int64_t count = std::min(kPieceElements, elements - first);
    const int piece = next_;
    next_ ^= 1;
    float* host = static_cast<float*>(pinned_->data()) + piece * kPieceElements;
    if (recorded_[piece]) {  // The copy that last read this piece.
      RETURN_IF_ERROR(runtime::CudaStatus(cudaEventSynchronize(copied_[piece]->get()),
                                          "cudaEventSynchronize", context));
      phases.Mark("initial values (upload)");
    }
    ir::FillInitialSlice(init, seed, name, first, absl::MakeSpan(host, count));
    phases.Mark("initial values (CPU)");
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(device + first * sizeof(float), host, count * sizeof(float),
                        cudaMemcpyHostToDevice, cudaStreamLegacy),
        "cudaMemcpyAsync", context));
    RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(copied_[piece]->get(), cudaStreamLegacy),
                                        "cudaEventRecord", context));
    recorded_[piece] = true;
    phases.Mark("initial values (upload)");
  }
  return absl::OkStatus();
}

}  // namespace reprise
