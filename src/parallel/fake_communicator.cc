#include "src/parallel/fake_communicator.h"

#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/ir/low_precision.h"
#include "src/parallel/rank_wait.h"
#include "src/util/status_macros.h"

namespace reprise::parallel {
namespace {

// What the ranks share: each rank's deposit and call, and a barrier.
class FakeWorld {
 public:
  explicit FakeWorld(int size) : size_(size), deposits_(size), calls_(size) {}
  int size() const { return size_; }

  // Deposits `bytes` of `data` under `call`, waits for every rank, checks the calls agree, runs
  // `finish` over all deposits, and waits again so no deposit is overwritten while read.
  absl::Status Meet(const RankWait& wait, std::string call, const void* data, int64_t bytes,
                    const std::function<void(const std::vector<std::string>&)>& finish) {
    const int rank = wait.rank();
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(Broken(wait, call));
      deposits_[rank].assign(static_cast<const char*>(data), static_cast<size_t>(bytes));
      calls_[rank] = call;
    }
    RETURN_IF_ERROR(Barrier(wait, call));
    absl::Status status;
    for (int r = 0; r < size_; ++r) {
      if (calls_[r] != call) {
        status = absl::InvalidArgumentError(
            absl::StrCat("rank ", rank, " called ", call, " but rank ", r, " called ", calls_[r]));
        break;
      }
    }
    if (status.ok()) finish(deposits_);
    RETURN_IF_ERROR(Barrier(wait, call));
    return status;
  }

 private:
  // OK while the job works; else the failed rank's error when this process knows it (as NCCL's
  // ranks would see the abort), or which rank gave up.
  absl::Status Broken(const RankWait& wait, absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_.ok()) return broken_;
    RETURN_IF_ERROR(wait.PeerFailure(call));
    return broken_;
  }

  absl::Status Barrier(const RankWait& wait, absl::string_view call) {
    int64_t seen;
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(Broken(wait, call));
      seen = generation_;
      if (++arrived_ == size_) {
        arrived_ = 0;
        ++generation_;
        return absl::OkStatus();
      }
    }
    absl::Status status = wait.Until(call, [&]() -> absl::StatusOr<bool> {
      absl::MutexLock lock(&mu_);
      if (generation_ != seen) return true;
      RETURN_IF_ERROR(Broken(wait, call));
      return false;
    });
    if (!status.ok()) {
      // The others must not wait for this rank any more than NCCL's peers would.
      absl::MutexLock lock(&mu_);
      if (broken_.ok()) {
        broken_ = absl::FailedPreconditionError(
            absl::StrCat("the job is broken: rank ", wait.rank(), " gave up: ", status.message()));
      }
    }
    return status;
  }

  const int size_;
  absl::Mutex mu_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> deposits_;
  std::vector<std::string> calls_;
};

float Load(const char* p, DType dtype) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return dtype == DType::kBFloat16 ? ir::BFloat16ToFloat(bits) : ir::HalfToFloat(bits);
}

void Store(float value, DType dtype, char* p) {
  if (dtype == DType::kFloat32) {
    std::memcpy(p, &value, sizeof(value));
    return;
  }
  const uint16_t bits =
      dtype == DType::kBFloat16 ? ir::FloatToBFloat16(value) : ir::FloatToHalf(value);
  std::memcpy(p, &bits, sizeof(bits));
}

class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeWorld> world, RankWait wait)
      : world_(std::move(world)), wait_(std::move(wait)) {}
  int rank() const override { return wait_.rank(); }
  int world_size() const override { return world_->size(); }
  Memory memory() const override { return Memory::kHost; }

  absl::Status AllReduceAverage(const void* send, void* recv, int64_t count, DType dtype,
                                cudaStream_t, absl::string_view what) override {
    if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
      return absl::UnimplementedError(
          absl::StrCat(what, ": all-reduce of ", DTypeName(dtype), " is not supported"));
    }
    const int64_t size = DTypeSize(dtype);
    const float scale = 1.0f / static_cast<float>(world_->size());
    return Annotate(
        what, world_->Meet(wait_, absl::StrCat("all_reduce(", count, " ", DTypeName(dtype), ")"),
                           send, count * size, [&](const std::vector<std::string>& all) {
                             for (int64_t i = 0; i < count; ++i) {
                               float sum = 0;
                               for (const std::string& d : all) {
                                 sum += Load(d.data() + i * size, dtype) * scale;
                               }
                               Store(sum, dtype, static_cast<char*>(recv) + i * size);
                             }
                           }));
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root, cudaStream_t,
                         absl::string_view what) override {
    if (root < 0 || root >= world_->size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": no rank ", root));
    }
    return Annotate(
        what, world_->Meet(wait_, absl::StrCat("broadcast(", bytes, " from ", root, ")"), data,
                           bytes, [&](const std::vector<std::string>& all) {
                             std::memcpy(data, all[root].data(), bytes);
                           }));
  }

  absl::Status AllGather(const void* send, void* recv, int64_t bytes, cudaStream_t,
                         absl::string_view what) override {
    return Annotate(what, world_->Meet(wait_, absl::StrCat("all_gather(", bytes, ")"), send, bytes,
                                       [&](const std::vector<std::string>& all) {
                                         for (size_t r = 0; r < all.size(); ++r) {
                                           std::memcpy(static_cast<char*>(recv) + r * bytes,
                                                       all[r].data(), bytes);
                                         }
                                       }));
  }

  // Host collectives are complete when they return.
  absl::Status WaitForStream(cudaStream_t, absl::string_view) override { return absl::OkStatus(); }

 private:
  static absl::Status Annotate(absl::string_view what, absl::Status status) {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  std::shared_ptr<FakeWorld> world_;
  RankWait wait_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeFakeCommunicators(
    int world_size, absl::Duration timeout, std::shared_ptr<DataParallelAbort> abort) {
  auto world = std::make_shared<FakeWorld>(world_size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.push_back(std::make_unique<FakeCommunicator>(world, RankWait(r, timeout, abort)));
  }
  return ranks;
}

}  // namespace reprise::parallel
