#include "src/runtime/kernel_activity.h"

#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace reprise::runtime {
namespace {

// The CUPTI entry points we use, found with dlopen.
struct Cupti {
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&::cuptiActivityEnable) enable;
  decltype(&::cuptiActivityDisable) disable;
  decltype(&::cuptiActivityFlushAll) flush_all;
  decltype(&::cuptiActivityGetNextRecord) next_record;
  decltype(&::cuptiActivityGetNumDroppedRecords) dropped;
  decltype(&::cuptiGetResultString) result_string;
};

absl::StatusOr<const Cupti*> LoadCupti() {
  static const absl::StatusOr<const Cupti*> loaded = []() -> absl::StatusOr<const Cupti*> {
    void* library = nullptr;
    for (const char* name : {"libcupti.so.13", "libcupti.so"}) {
      library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (library != nullptr) break;
    }
    if (library == nullptr) {
      return absl::UnavailableError("CUPTI (libcupti.so) is not on the library path");
    }
    auto* c = new Cupti;  // Lives as long as the process, like the library.
    bool ok = true;
    auto find = [&](auto& slot, const char* symbol) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(library, symbol));
      ok = ok && slot != nullptr;
    };
    find(c->register_callbacks, "cuptiActivityRegisterCallbacks");
    find(c->enable, "cuptiActivityEnable");
    find(c->disable, "cuptiActivityDisable");
    find(c->flush_all, "cuptiActivityFlushAll");
    find(c->next_record, "cuptiActivityGetNextRecord");
    find(c->dropped, "cuptiActivityGetNumDroppedRecords");
    find(c->result_string, "cuptiGetResultString");
    if (!ok) return absl::UnavailableError("libcupti lacks an activity API function we need");
    return c;
  }();
  return loaded;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};

// What the callbacks collect; CUPTI's buffers are per process, so is this.
absl::Mutex mu(absl::kConstInit);
bool recording ABSL_GUARDED_BY(mu) = false;
std::vector<std::pair<uint64_t, uint64_t>>* intervals ABSL_GUARDED_BY(mu) = nullptr;
int64_t kernels ABSL_GUARDED_BY(mu) = 0;
int64_t copies ABSL_GUARDED_BY(mu) = 0;
double kernel_sum_ns ABSL_GUARDED_BY(mu) = 0;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  const absl::StatusOr<const Cupti*> cupti = LoadCupti();
  CUpti_Activity* record = nullptr;
  absl::MutexLock lock(&mu);
  while (cupti.ok() && (*cupti)->next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      intervals->emplace_back(k->start, k->end);
      kernel_sum_ns += static_cast<double>(k->end - k->start);
      ++kernels;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      intervals->emplace_back(m->start, m->end);
      ++copies;
    }
  }
  std::free(buffer);
}

absl::Status CuptiStatus(const Cupti& c, CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  c.result_string(result, &text);
  return absl::InternalError(absl::StrCat(call, " failed: ", text != nullptr ? text : "?"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelActivity>> KernelActivity::Start() {
  absl::StatusOr<const Cupti*> cupti = LoadCupti();
  if (!cupti.ok()) return cupti.status();
  const Cupti& c = **cupti;
  {
    absl::MutexLock lock(&mu);
    if (recording) return absl::FailedPreconditionError("another KernelActivity is recording");
    recording = true;
    if (intervals == nullptr) intervals = new std::vector<std::pair<uint64_t, uint64_t>>();
    intervals->clear();
    kernels = copies = 0;
    kernel_sum_ns = 0;
  }
  absl::Status status = CuptiStatus(c, c.register_callbacks(BufferRequested, BufferCompleted),
                                    "cuptiActivityRegisterCallbacks");
  for (CUpti_ActivityKind kind : kKinds) {
    if (status.ok()) status = CuptiStatus(c, c.enable(kind), "cuptiActivityEnable");
  }
  if (!status.ok()) {
    absl::MutexLock lock(&mu);
    recording = false;
    return status;
  }
  return std::unique_ptr<KernelActivity>(new KernelActivity());
}

absl::StatusOr<KernelActivity::Summary> KernelActivity::Stop() {
  if (stopped_) return absl::FailedPreconditionError("KernelActivity stopped twice");
  stopped_ = true;
  const Cupti& c = **LoadCupti();
  absl::Status status =
      CuptiStatus(c, c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind kind : kKinds) (void)c.disable(kind);
  size_t dropped = 0;
  (void)c.dropped(nullptr, 0, &dropped);
  absl::MutexLock lock(&mu);
  recording = false;
  if (!status.ok()) return status;
  Summary s;
  s.kernels = kernels;
  s.copies = copies;
  s.kernel_sum_ms = kernel_sum_ns / 1e6;
  s.dropped = static_cast<int64_t>(dropped);
  std::sort(intervals->begin(), intervals->end());
  uint64_t covered_until = 0;
  double busy_ns = 0;
  for (const auto& [start, end] : *intervals) {
    const uint64_t from = std::max(start, covered_until);
    if (end > from) busy_ns += static_cast<double>(end - from);
    covered_until = std::max(covered_until, end);
  }
  s.busy_ms = busy_ns / 1e6;
  return s;
}

KernelActivity::~KernelActivity() {
  if (!stopped_) (void)Stop();
}

}  // namespace reprise::runtime
