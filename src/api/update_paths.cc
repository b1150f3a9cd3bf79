#include "src/api/update_paths.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

constexpr UpdatePath kAllPaths[] = {UpdatePath::kStep, UpdatePath::kLearningRate,
                                    UpdatePath::kBindInput, UpdatePath::kExecUpdate,
                                    UpdatePath::kReinstantiate};

bool Recaptures(UpdatePath path) {
  return path == UpdatePath::kExecUpdate || path == UpdatePath::kReinstantiate;
}

// The counters and reasons of a trainer at one moment.
struct Snapshot {
  TrainerStats stats;
  std::map<std::string, int64_t> recapture_reasons, instantiation_reasons;
};

Snapshot Take(const Trainer::Impl& trainer) {
  TrainerReport report = trainer.Report();
  return {report.stats,
          {report.recapture_reasons.begin(), report.recapture_reasons.end()},
          {report.instantiation_reasons.begin(), report.instantiation_reasons.end()}};
}

std::vector<std::pair<std::string, int64_t>> Grown(const std::map<std::string, int64_t>& before,
                                                   const std::map<std::string, int64_t>& after) {
  std::vector<std::pair<std::string, int64_t>> grown;
  for (const auto& [reason, count] : after) {
    auto it = before.find(reason);
    const int64_t delta = count - (it == before.end() ? 0 : it->second);
    if (delta != 0) grown.emplace_back(reason, delta);
  }
  return grown;
}

UpdateCounters Difference(const Snapshot& before, const Snapshot& after) {
  const TrainerStats& b = before.stats;
  const TrainerStats& a = after.stats;
  return {
      .replays = a.graph_replays - b.graph_replays,
      .captures = a.graph_captures - b.graph_captures,
      .instantiations = a.graph_instantiations - b.graph_instantiations,
      .exec_updates = a.graph_exec_updates - b.graph_exec_updates,
      .node_updates = a.graph_node_updates - b.graph_node_updates,
      .recapture_reasons = Grown(before.recapture_reasons, after.recapture_reasons),
      .instantiation_reasons = Grown(before.instantiation_reasons, after.instantiation_reasons)};
}

// One path on one trainer: what changes before each Step().
class PathRunner {
 public:
  PathRunner(Trainer::Impl& trainer, UpdatePath path, float learning_rate)
      : trainer_(trainer), path_(path), learning_rate_(learning_rate) {}

  // kBindInput: two zeroed device buffers of `input`'s size, and the first binding (a
  // re-capture, since the captured step had no copy from caller memory for it).
  absl::Status Prepare(const std::string& input) {
    if (path_ != UpdatePath::kBindInput) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Trainer::Impl::NamedTensor tensor,
                     trainer_.Resolve(input, ir::InputOp(), "input"));
    input_ = input;
    bytes_ = static_cast<size_t>(tensor.spec.bytes());
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, runtime::DeviceBuffer::Create(bytes_));
      RETURN_IF_ERROR(runtime::CudaStatus(cudaMemset(buffer.data(), 0, bytes_), "cudaMemset",
                                          absl::StrCat("bound copy of input '", input, "'")));
      buffers_.push_back(std::move(buffer));
    }
    // The memsets ran on the legacy stream, which the step's stream does not wait for.
    RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                                        "cudaStreamSynchronize", "zeroed bound copies"));
    return trainer_.BindInput(input_, buffers_[0].data(), bytes_);
  }

  // The change made before one Step(): each repetition changes something (another rate,
  // another pointer), so no update is skipped as a no-op.
  absl::Status Change() {
    flip_ ^= 1;
    switch (path_) {
      case UpdatePath::kStep:
        return absl::OkStatus();
      case UpdatePath::kLearningRate: {
        const float rate = flip_ != 0 ? learning_rate_ * 0.5f : learning_rate_;
        return trainer_.SetInput(autodiff::kLearningRate, &rate, 1, DType::kFloat32);
      }
      case UpdatePath::kBindInput:
        return trainer_.BindInput(input_, buffers_[flip_].data(), bytes_);
      case UpdatePath::kExecUpdate:
        return trainer_.ForceRecapture(capture::CapturedStep::Apply::kUpdateElseInstantiate);
      case UpdatePath::kReinstantiate:
        return trainer_.ForceRecapture(capture::CapturedStep::Apply::kInstantiate);
    }
    return absl::InternalError("unknown update path");
  }

  // Unbinds what Prepare bound, before its buffers go.
  absl::Status Finish() {
    if (path_ != UpdatePath::kBindInput) return absl::OkStatus();
    return trainer_.BindInput(input_, nullptr, 0);
  }

 private:
  Trainer::Impl& trainer_;
  const UpdatePath path_;
  const float learning_rate_;
  std::string input_;
  size_t bytes_ = 0;
  std::vector<runtime::DeviceBuffer> buffers_;
  int flip_ = 0;
};

absl::StatusOr<UpdatePathResult> MeasurePath(Trainer::Impl& trainer, UpdatePath path,
                                             const UpdateBenchOptions& bench, float learning_rate) {
  PathRunner runner(trainer, path, learning_rate);
  RETURN_IF_ERROR(runner.Prepare(bench.bound_input));
  const int reps = Recaptures(path) ? bench.recapture_reps : bench.reps;
  UpdatePathResult result{.path = path};
  Snapshot before;
  for (int i = -bench.warmup; i < reps; ++i) {
    // The device idle before each repetition, so that no host call below waits for it (SetInput
    // and BindInput wait for the queued step, which is device time).
    RETURN_IF_ERROR(trainer.Synchronize());
    if (i == 0) before = Take(trainer);
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(runner.Change());
    const absl::Time changed = absl::Now();
    RETURN_IF_ERROR(trainer.Step());
    const absl::Time stepped = absl::Now();
    if (i < 0) continue;
    if (path != UpdatePath::kStep) {
      result.update_us.push_back(absl::ToDoubleMicroseconds(changed - start));
    }
    result.step_us.push_back(absl::ToDoubleMicroseconds(stepped - changed));
  }
  RETURN_IF_ERROR(trainer.Synchronize());
  result.counters = Difference(before, Take(trainer));
  RETURN_IF_ERROR(runner.Finish());
  return result;
}

}  // namespace

absl::string_view UpdatePathName(UpdatePath path) {
  switch (path) {
    case UpdatePath::kStep:
      return "step";
    case UpdatePath::kLearningRate:
      return "learning_rate";
    case UpdatePath::kBindInput:
      return "bind_input";
    case UpdatePath::kExecUpdate:
      return "exec_update";
    case UpdatePath::kReinstantiate:
      return "reinstantiate";
  }
  return "?";
}

absl::StatusOr<std::vector<UpdatePath>> ParseUpdatePaths(absl::string_view list) {
  if (list == "all") return std::vector<UpdatePath>(std::begin(kAllPaths), std::end(kAllPaths));
  std::vector<UpdatePath> paths;
  absl::flat_hash_set<absl::string_view> seen;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const UpdatePath* found = std::find_if(std::begin(kAllPaths), std::end(kAllPaths),
                                           [&](UpdatePath p) { return UpdatePathName(p) == name; });
    if (found == std::end(kAllPaths)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown update path '", name,
                       "': expected all, or step, learning_rate, bind_input, exec_update, "
                       "reinstantiate separated by commas"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("update path '", name, "' named twice"));
    }
    paths.push_back(*found);
  }
  if (paths.empty()) return absl::InvalidArgumentError("no update path named");
  return paths;
}

absl::StatusOr<UpdateBenchResult> MeasureUpdatePaths(const Graph& graph, Value loss,
                                                     const TrainOptions& options,
                                                     const UpdateBenchOptions& bench) {
  if (options.launch.mode != ExecMode::kGraph) {
    return absl::InvalidArgumentError(
        absl::StrCat("update paths belong to the captured step: mode must be graph, not ",
                     ExecModeName(options.launch.mode)));
  }
  if (bench.paths.empty()) return absl::InvalidArgumentError("no update path to measure");
  if (bench.reps < 1 || bench.recapture_reps < 1 || bench.warmup < 0 || bench.device_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "needs reps >= 1, recapture_reps >= 1, warmup >= 0 and device_steps >= 1; got ", bench.reps,
        ", ", bench.recapture_reps, ", ", bench.warmup, ", ", bench.device_steps));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer::Impl> trainer,
                   Trainer::Impl::Create(graph, loss, options));
  if (std::find(bench.paths.begin(), bench.paths.end(), UpdatePath::kBindInput) !=
      bench.paths.end()) {
    // Before anything is timed: an unknown input is the caller's error, not a late failure.
    RETURN_IF_ERROR(trainer->Resolve(bench.bound_input, ir::InputOp(), "input").status());
  }
  UpdateBenchResult result;
  // The first replays upload the graph and warm the caches; the timed ones follow.
  RETURN_IF_ERROR(trainer->TimeSteps(std::max(bench.warmup, 1)).status());
  ASSIGN_OR_RETURN(std::vector<float> ms, trainer->TimeSteps(bench.device_steps));
  std::sort(ms.begin(), ms.end());
  result.step_device_ms = ms[ms.size() / 2];
  const TrainerStats stats = trainer->stats();
  result.launches_per_step = stats.launches_per_step;
  result.graph_nodes = stats.graph_nodes;
  result.lanes = static_cast<int>(stats.lanes);
  const float learning_rate = options.optimizer.learning_rate;
  for (UpdatePath path : bench.paths) {
    ASSIGN_OR_RETURN(UpdatePathResult measured, MeasurePath(*trainer, path, bench, learning_rate));
    result.paths.push_back(std::move(measured));
  }
  return result;
}

}  // namespace reprise
