// Checkpoint files: the whole training state as one safetensors file (src/util/safetensors.h), so
// PyTorch reads it like any other, whose metadata carries under "reprise.checkpoint" a small JSON
// header:
//
//   {"format_version": 1, "model": "<fingerprint>", "step": 1200, "sha256": "<hex>"}
//
// "model" is the fingerprint of the model the state belongs to (src/api/model_fingerprint.h), so
// the state of another model is refused; "step" is the number of Step() calls behind it. "sha256"
// covers everything else in the file that means something: the other header fields, the other
// metadata entries and, for every tensor in name order, its name, dtype, shape and bytes. A bit
// flipped anywhere is therefore either unparseable or a checksum mismatch, never a quietly
// different state. Host-only: no CUDA here, so all of it is tested on the CPU.
//
//   RETURN_IF_ERROR(WriteCheckpoint(path, {.model = fingerprint, .step = 1200}, tensors));
//   ASSIGN_OR_RETURN(Checkpoint checkpoint, ReadCheckpoint(path));
//   RETURN_IF_ERROR(CheckCheckpointMatches(checkpoint, path, fingerprint, expected));
#ifndef REPRISE_SRC_API_CHECKPOINT_FORMAT_H_
#define REPRISE_SRC_API_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/util/safetensors.h"

namespace reprise {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr char kCheckpointMetadataKey[] = "reprise.checkpoint";

struct CheckpointHeader {
  int64_t format_version = kCheckpointFormatVersion;
  std::string model;  // The model's fingerprint.
  int64_t step = 0;   // Step() calls taken before the state was saved.
};

// The file's bytes: what WriteCheckpoint writes. InvalidArgument as util::SerializeSafetensors,
// or for a negative step.
absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointHeader& header,
                                                absl::Span<const util::TensorView> tensors);

// Writes the checkpoint to a temporary file beside `path` and renames it into place
// (util::WriteSafetensors), so a crash leaves the old file or the new one, never a part.
absl::Status WriteCheckpoint(const std::string& path, const CheckpointHeader& header,
                             absl::Span<const util::TensorView> tensors);

struct Checkpoint {
  CheckpointHeader header;
  util::SafetensorsFile file;  // The tensors, checked against the checksum.
};

// Parses a whole file; `origin` (the path) opens every message. DataLoss for missing bytes (as
// util::ParseSafetensors) and for a checksum that does not match; InvalidArgument for a
// safetensors file without the header (a weights file: Trainer::LoadWeights reads those), a
// malformed header, or a format version this build does not read.
absl::StatusOr<Checkpoint> ParseCheckpoint(std::string bytes, absl::string_view origin);
// Reads and parses the file at `path`: NotFound when there is none, then as ParseCheckpoint.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// A tensor a restore will write: its name, file dtype and shape.
struct ExpectedTensor {
  std::string name;
  util::SafetensorsDType dtype = util::SafetensorsDType::kF32;
  std::vector<int64_t> shape;
};

// Whether `checkpoint` is the state of model `model` with exactly the tensors `expected`.
// FailedPrecondition when the model fingerprint differs; InvalidArgument naming the tensor for a
// dtype or shape that differs, a tensor the file lacks, or a tensor the model does not have.
absl::Status CheckCheckpointMatches(const Checkpoint& checkpoint, absl::string_view origin,
                                    absl::string_view model,
                                    absl::Span<const ExpectedTensor> expected);

}  // namespace reprise

#endif  // REPRISE_SRC_API_CHECKPOINT_FORMAT_H_
