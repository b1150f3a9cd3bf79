// The kernel store: CUDA C++ source -> NVRTC -> CUBIN (and PTX) -> loaded function, each step
// done once.
//
// Lookup goes down through layers, fastest first, and fills the ones above on the way back:
//   function table (this process, this context) -> CUBIN kept in memory -> lower layer
//   (optional CubinLayer, e.g. the on-disk DiskCache) -> NVRTC.
// Entries are keyed by a SHA-256 of everything that changes the CUBIN (see Key()). Prefetch()
// fills the CUBIN layer for many kernels on parallel threads, so that a cold start compiles them
// at once; loading modules stays on the thread that asks for functions.
#ifndef REPRISE_SRC_RUNTIME_KERNEL_STORE_H_
#define REPRISE_SRC_RUNTIME_KERNEL_STORE_H_

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "src/runtime/kernel_binary.h"
#include "src/runtime/owners.h"

namespace reprise::runtime {

struct KernelSource {
  std::string name;  // The __global__ extern "C" function to look up in the compiled module.
  std::string code;
  std::vector<std::string> options;  // NVRTC options beyond the store's own.
  // Whether `code` waits for its producer grids first thing (src/codegen/grid_dependency.h), so
  // that it may be launched as a programmatic dependent launch. Not part of the store's key.
  bool waits_for_producers = false;
};

struct CompiledKernel {
  std::string cubin;
  std::string ptx;
  std::string log;  // NVRTC's log; warnings, if any.
  double compile_ms = 0;
};

// Compiles `source` to a CUBIN and PTX for `arch` (e.g. "sm_90") with IEEE-exact math (no
// --use_fast_math), C++17 and the source's options. Needs no GPU. kInvalidArgument, with the
// kernel name and NVRTC's log in the message, when the source does not compile.
absl::StatusOr<CompiledKernel> CompileWithNvrtc(const KernelSource& source, absl::string_view arch);

// A store of compiled kernels (CUBIN and PTX) below the in-process one, typically on disk and
// shared between processes.
// Implementations must be thread-safe and must never return an entry they cannot vouch for.
class CubinLayer {
 public:
  virtual ~CubinLayer() = default;
  // The binary stored under `key`, or nullopt on a miss or an entry that failed its checks.
  virtual std::optional<KernelBinary> Find(absl::string_view key) = 0;
  // Best effort: a failure to store only costs a later compile.
  virtual void Store(absl::string_view key, const KernelBinary& binary) = 0;

  struct Stats {
    int64_t corrupt_discarded = 0;  // Entries that failed their checks and were deleted.
    int64_t stores = 0;
    int64_t store_failures = 0;
    int64_t pruned = 0;  // Entries removed to keep the layer under its size cap.
  };
  virtual Stats stats() const { return {}; }
};

// Serves one CUDA context: functions are loaded into the context current at the first request
// for them, and modules are unloaded when the store is destroyed, so that context must still be
// current then. Thread-safe; concurrent requests for one kernel compile it once, while different
// kernels compile in parallel.
class KernelStore {
 public:
  explicit KernelStore(std::string arch, std::unique_ptr<CubinLayer> lower = nullptr);
  ~KernelStore();
  KernelStore(const KernelStore&) = delete;
  KernelStore& operator=(const KernelStore&) = delete;

  // The loaded function for `source`; compiles and loads on first use. Compile errors are
  // kInvalidArgument (see CompileWithNvrtc) and are retried on the next request.
  absl::StatusOr<CUfunction> GetFunction(const KernelSource& source);

  // Obtains the CUBIN of every source (from memory, the lower layer or NVRTC) on up to
  // HardwareThreads() threads, without loading anything: needs no GPU and no current context.
  // Every source is attempted; the error returned is the first failing source's, in order.
  // `on_ready(done, total)`, when given, is called with done == 0 first and once per source
  // obtained after that, one call at a time (under a lock, from whichever thread obtained it).
  absl::Status Prefetch(absl::Span<const KernelSource> sources,
                        const std::function<void(int64_t done, int64_t total)>& on_ready = {});

  // The CUBIN and PTX of `source`, obtained as Prefetch does.
  absl::StatusOr<KernelBinary> GetBinary(const KernelSource& source);

  // Hits and misses per layer, top down. A GetFunction counts at the function table, and on a
  // miss there at the CUBIN layer; Prefetch and GetBinary start at the CUBIN layer. A CUBIN miss
  // goes to the lower layer (if any), and a miss there to NVRTC.
  struct Stats {
    int64_t memory_hits = 0;    // Function table: requests answered with a loaded function.
    int64_t memory_misses = 0;  // Function table: requests that had to load a module.
    int64_t cubin_hits = 0;     // CUBINs already in this process.
    int64_t cubin_misses = 0;
    int64_t lower_hits = 0;  // CUBINs found in the lower layer (the disk).
    int64_t lower_misses = 0;
    int64_t compiles = 0;          // NVRTC compilations that succeeded.
    int64_t compile_failures = 0;  // NVRTC compilations that failed.
    int64_t loads = 0;             // Modules loaded.
    // Lower-layer entries that failed their checks and were deleted (then compiled again).
    int64_t corrupt_discarded = 0;
    int64_t lower_store_failures = 0;
    double compile_ms = 0;  // Summed over compiles, which may run in parallel.
    double lower_ms = 0;    // Time spent in the lower layer's Find and Store.
    double load_ms = 0;
  };
  Stats stats() const;

  // Small records a measurement chose (e.g. a cuDNN plan, plan_record.h), kept in the lower
  // layer beside the kernels so that later processes skip the measurement. `key` is a hex
  // SHA-256 the caller derives from everything the choice depends on; `kind` names what the
  // record is and is checked on the way back, with the store's arch. FindRecord: nullopt without a
  // lower layer, on a miss, or for an entry of another kind or arch. StoreRecord: best effort, as
  // CubinLayer::Store.
  std::optional<std::string> FindRecord(absl::string_view key, absl::string_view kind);
  void StoreRecord(absl::string_view key, absl::string_view kind, std::string record);

  const std::string& arch() const { return arch_; }
  // The lower layer, or null.
  const CubinLayer* lower() const { return lower_.get(); }

  // Hex SHA-256 over a length-prefixed encoding of the store's format version, the NVRTC
  // version, `arch`, the kernel name, each option and the code.
  static std::string Key(const KernelSource& source, absl::string_view arch);

 private:
  struct Entry {
    absl::Mutex mu;
    std::optional<KernelBinary> binary ABSL_GUARDED_BY(mu);
    std::optional<Module> module ABSL_GUARDED_BY(mu);
    CUfunction function ABSL_GUARDED_BY(mu) = nullptr;
  };

  // The entry for `key`, created empty on first use.
  Entry& EntryFor(const std::string& key);
  // Fills entry.binary, if empty, from the lower layer or NVRTC; counts at the CUBIN layer down.
  absl::Status EnsureBinary(const KernelSource& source, const std::string& key, Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mu);

  const std::string arch_;
  const std::unique_ptr<CubinLayer> lower_;
  mutable absl::Mutex mu_;
  // Entries are never erased, so a pointer taken under mu_ stays valid after it is released.
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_KERNEL_STORE_H_
