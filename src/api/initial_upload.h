// Large float32 initial values drawn straight into pinned memory and copied to the device while
// the next piece is drawn: Trainer::Create's initial values without a host tensor of the whole
// weight (allocated, zeroed, filled on one pass, then copied from pageable memory).
#ifndef REPRISE_SRC_API_INITIAL_UPLOAD_H_
#define REPRISE_SRC_API_INITIAL_UPLOAD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "reprise/graph.h"
#include "src/runtime/owners.h"
#include "src/util/phase_timer.h"

namespace reprise {

class InitialUpload {
 public:
  // Float32 elements per piece: two pinned pieces of 8 MiB, taken at the first Upload.
  static constexpr int64_t kPieceElements = int64_t{1} << 21;
  // Tensors this large and up go through Upload; a smaller one costs no more the plain way.
  static constexpr int64_t kMinElements = int64_t{1} << 18;

  InitialUpload() = default;
  InitialUpload(const InitialUpload&) = delete;
  InitialUpload& operator=(const InitialUpload&) = delete;
  // Waits for the copies still reading the pinned pieces before they are freed.
  ~InitialUpload();

  // Writes what ir::FillInitial gives a float32 tensor `name` of `elements` values into
  // `device`, piece by piece: drawn on every core into one pinned piece while the other's copy
  // runs on the legacy stream (ordered after the arena's cudaMemset; the caller waits for that
  // stream once at the end). Books the drawing and the waits under `phases`' names.
  absl::Status Upload(const Initializer& init, uint64_t seed, const std::string& name,
                      int64_t elements, char* device, util::PhaseTimer& phases);

 private:
  std::optional<runtime::PinnedBuffer> pinned_;
  std::optional<runtime::Event> copied_[2];
  bool recorded_[2] = {false, false};
  int next_ = 0;
};

}  // namespace reprise

#endif  // REPRISE_SRC_API_INITIAL_UPLOAD_H_
