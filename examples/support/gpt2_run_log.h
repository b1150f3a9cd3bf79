// What train_gpt2 writes so that another trainer can repeat its run and compare the losses
// (tools/bench/torch_gpt2_train.py, tools/bench/gpt2_loss_compare.py):
//
// The loss log (--loss_log), text, one record per line:
//   config <key> <value>   the run's settings (model, optimizer, schedule, data), first
//   train <step> <loss>    every training step (from 1): the loss of that step's forward
//   val <step> <loss>      the validation loss after that step (mean over the evaluation batches)
// The batch log (--batch_log), binary: for every step in order, B rows of T + 1 little-endian
// uint16 tokens, row b being the window the loader read for sequence b (its inputs, then its
// last target).
#ifndef REPRISE_EXAMPLES_SUPPORT_GPT2_RUN_LOG_H_
#define REPRISE_EXAMPLES_SUPPORT_GPT2_RUN_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace reprise::examples {

class Gpt2RunLog {
 public:
  // Opens (truncating) the logs whose paths are not empty. Internal naming the path on failure.
  static absl::StatusOr<Gpt2RunLog> Open(const std::string& loss_log, const std::string& batch_log);

  absl::Status Config(absl::string_view key, absl::string_view value);
  // tokens and targets are one batch, [B, T] row-major, as TokenLoader::Next wrote them.
  absl::Status Batch(absl::Span<const int32_t> tokens, absl::Span<const int32_t> targets,
                     int64_t batch, int64_t seq);
  absl::Status Train(int step, float loss);
  absl::Status Validation(int step, float loss);
  // Flushes both logs and closes them; Internal naming the path if a write failed.
  absl::Status Close();

  bool logs_losses() const { return loss_ != nullptr; }
  bool logs_batches() const { return batches_ != nullptr; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, Closer>;
  absl::Status Line(const std::string& line);

  std::string loss_path_, batch_path_;
  File loss_, batches_;
};

}  // namespace reprise::examples

#endif  // REPRISE_EXAMPLES_SUPPORT_GPT2_RUN_LOG_H_
