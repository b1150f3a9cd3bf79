#include "examples/support/gpt2_run_log.h"

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace reprise::examples {
namespace {

absl::Status WriteError(const std::string& path) {
  return absl::InternalError(absl::StrCat("writing '", path, "': ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<Gpt2RunLog> Gpt2RunLog::Open(const std::string& loss_log,
                                            const std::string& batch_log) {
  Gpt2RunLog log;
  log.loss_path_ = loss_log;
  log.batch_path_ = batch_log;
  if (!loss_log.empty()) {
    log.loss_.reset(std::fopen(loss_log.c_str(), "w"));
    if (log.loss_ == nullptr) return WriteError(loss_log);
  }
  if (!batch_log.empty()) {
    log.batches_.reset(std::fopen(batch_log.c_str(), "wb"));
    if (log.batches_ == nullptr) return WriteError(batch_log);
  }
  return log;
}

absl::Status Gpt2RunLog::Line(const std::string& line) {
  if (loss_ == nullptr) return absl::OkStatus();
  if (std::fputs(line.c_str(), loss_.get()) < 0) return WriteError(loss_path_);
  return absl::OkStatus();
}

absl::Status Gpt2RunLog::Config(absl::string_view key, absl::string_view value) {
  return Line(absl::StrCat("config ", key, " ", value, "\n"));
}

absl::Status Gpt2RunLog::Train(int step, float loss) {
  return Line(absl::StrFormat("train %d %.9g\n", step, loss));
}

absl::Status Gpt2RunLog::Validation(int step, float loss) {
  return Line(absl::StrFormat("val %d %.9g\n", step, loss));
}

absl::Status Gpt2RunLog::Batch(absl::Span<const int32_t> tokens, absl::Span<const int32_t> targets,
                               int64_t batch, int64_t seq) {
  if (batches_ == nullptr) return absl::OkStatus();
  std::vector<unsigned char> bytes;
  bytes.reserve(static_cast<size_t>(batch * (seq + 1) * 2));
  auto put = [&bytes](int32_t token) {  // Little-endian uint16 on any host.
    bytes.push_back(static_cast<unsigned char>(token & 0xff));
    bytes.push_back(static_cast<unsigned char>((token >> 8) & 0xff));
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) put(tokens[b * seq + t]);
    put(targets[b * seq + seq - 1]);
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), batches_.get()) != bytes.size()) {
    return WriteError(batch_path_);
  }
  return absl::OkStatus();
}

absl::Status Gpt2RunLog::Close() {
  for (auto [file, path] : {std::pair{&loss_, &loss_path_}, std::pair{&batches_, &batch_path_}}) {
    if (*file == nullptr) continue;
    const bool failed = std::fflush(file->get()) != 0 || std::ferror(file->get()) != 0;
    if (std::fclose(file->release()) != 0 || failed) return WriteError(*path);
  }
  return absl::OkStatus();
}

}  // namespace reprise::examples
