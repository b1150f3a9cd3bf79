#include "reprise/local_data_parallel.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/passes/data_parallel.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise {

// One thread per rank, its GPU made current once, running the jobs ForEachRank hands it.
class LocalDataParallel::Workers {
 public:
  explicit Workers(int ranks) : slots_(ranks) {
    for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r] { Serve(r); });
  }
  ~Workers() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(slots_.size()); }

  // Runs job(r) on rank r's thread for every r; waits for all; the first error by rank.
  absl::Status RunOnEach(const std::function<absl::Status(int)>& job) {
    absl::MutexLock lock(&mu_);
    for (Slot& s : slots_) {
      s.job = &job;
      s.done = false;
    }
    ++generation_;
    mu_.Await(absl::Condition(this, &Workers::AllDone));
    for (Slot& s : slots_) s.job = nullptr;
    for (const Slot& s : slots_) RETURN_IF_ERROR(s.result);
    return absl::OkStatus();
  }

 private:
  struct Slot {
    const std::function<absl::Status(int)>* job = nullptr;
    bool done = true;
    absl::Status result;
  };
  bool AllDone() const {
    for (const Slot& s : slots_) {
      if (!s.done) return false;
    }
    return true;
  }
  void Serve(int rank) {
    const absl::Status device = runtime::UseDevice(rank).status();
    int64_t seen = 0;
    absl::MutexLock lock(&mu_);
    while (true) {
      struct Ready {
        const Workers* w;
        const int64_t* seen;
        bool Check() const { return w->stop_ || w->generation_ != *seen; }
      } ready{this, &seen};
      mu_.Await(absl::Condition(&ready, &Ready::Check));
      if (stop_) return;
      seen = generation_;
      const std::function<absl::Status(int)>* job = slots_[rank].job;
      mu_.Unlock();
      absl::Status result = device.ok() ? (*job)(rank) : device;
      mu_.Lock();
      slots_[rank].result = std::move(result);
      slots_[rank].done = true;
    }
  }

  absl::Mutex mu_;
  std::vector<Slot> slots_;
  int64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

LocalDataParallel::LocalDataParallel(std::unique_ptr<Workers> workers)
    : workers_(std::move(workers)), trainers_(workers_->size()) {}

LocalDataParallel::~LocalDataParallel() {
  // Each trainer is destroyed on its own thread, with its GPU current.
  if (workers_ != nullptr) {
    (void)workers_->RunOnEach([this](int rank) {
      trainers_[rank].reset();
      return absl::OkStatus();
    });
  }
}

absl::StatusOr<std::unique_ptr<LocalDataParallel>> LocalDataParallel::Create(
    const Graph& graph, Value loss, const TrainOptions& options, int gpus) {
  ASSIGN_OR_RETURN(const int visible, runtime::VisibleDeviceCount());
  if (visible == 0) {
    return absl::FailedPreconditionError(
        "LocalDataParallel needs a CUDA device and none is visible");
  }
  if (gpus < 0 || gpus > visible) {
    return absl::FailedPreconditionError(
        absl::StrCat("LocalDataParallel: ", gpus, " ranks (one per GPU) asked, but ", visible,
                     " GPU", visible == 1 ? " is" : "s are", " visible"));
  }
  const int world = gpus == 0 ? visible : gpus;
  DataParallel dp = options.parallel.data_parallel.value_or(DataParallel{});
  dp.world_size = world;
  dp.rank = 0;
  // Everything that fails alike on every rank fails here, before any rank waits for the others.
  RETURN_IF_ERROR(passes::ValidateDataParallel(dp));
  ASSIGN_OR_RETURN(dp.id, NewDataParallelId());
  // One rank's failure ends the others' waits for it at once.
  dp.abort = std::make_shared<DataParallelAbort>();
  auto local =
      std::unique_ptr<LocalDataParallel>(new LocalDataParallel(std::make_unique<Workers>(world)));
  std::vector<absl::Status> results(world);
  const absl::Status first = local->workers_->RunOnEach([&](int rank) -> absl::Status {
    TrainOptions mine = options;
    mine.device = rank;
    mine.parallel.data_parallel = dp;
    mine.parallel.data_parallel->rank = rank;
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(graph, loss, mine);
    results[rank] = trainer.status();
    if (trainer.ok()) local->trainers_[rank] = *std::move(trainer);
    return results[rank];
  });
  if (first.ok()) return local;
  // The rank that failed first says why; the others gave up waiting for it.
  if (const std::optional<DataParallelAbort::Failure> failure = dp.abort->failure()) {
    return results[failure->rank];
  }
  return first;
}

int LocalDataParallel::world_size() const { return workers_->size(); }

Trainer& LocalDataParallel::trainer(int rank) { return *trainers_.at(rank); }

absl::Status LocalDataParallel::ForEachRank(
    const std::function<absl::Status(int rank, Trainer& trainer)>& fn) {
  return workers_->RunOnEach([&](int rank) { return fn(rank, *trainers_[rank]); });
}

absl::Status LocalDataParallel::Step() {
  return ForEachRank([](int, Trainer& t) { return t.Step(); });
}

absl::Status LocalDataParallel::Synchronize() {
  return ForEachRank([](int, Trainer& t) { return t.Synchronize(); });
}

}  // namespace reprise
