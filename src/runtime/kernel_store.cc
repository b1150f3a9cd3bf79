#include "src/runtime/kernel_store.h"

#include <nvrtc.h>

#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/sha256.h"
#include "src/util/parallel_for.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace {

// Bump whenever the store's own compile options or the key's encoding change, so that stale
// CUBINs in a lower layer are never matched.
constexpr absl::string_view kFormatVersion = "reprise-kernel-store-1";

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { (void)nvrtcDestroyProgram(&program); }
};
using Program = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string ProgramLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // Drop the terminating NUL.
  return log;
}

// Length-prefixed, so that ("ab", "c") and ("a", "bc") hash differently.
void HashField(Sha256Hasher& hasher, absl::string_view field) {
  const uint64_t size = field.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(size >> (8 * i));
  hasher.Update(absl::string_view(prefix, sizeof(prefix)));
  hasher.Update(field);
}

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

}  // namespace

absl::StatusOr<CompiledKernel> CompileWithNvrtc(const KernelSource& source,
                                                absl::string_view arch) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context = absl::StrCat("kernel '", source.name, "' for ", arch);
  nvrtcProgram raw = nullptr;
  RETURN_IF_ERROR(CudaStatus(nvrtcCreateProgram(&raw, source.code.c_str(),
                                                (source.name + ".cu").c_str(), 0, nullptr, nullptr),
                             "nvrtcCreateProgram", context));
  Program program(raw);

  std::vector<std::string> options = {absl::StrCat("--gpu-architecture=", arch), "-std=c++17"};
  options.insert(options.end(), source.options.begin(), source.options.end());
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());

  const nvrtcResult compiled = nvrtcCompileProgram(
      program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  CompiledKernel result;
  result.log = ProgramLog(program.get());
  if (compiled != NVRTC_SUCCESS) {
    const absl::Status status = CudaStatus(compiled, "nvrtcCompileProgram", context);
    return absl::Status(
        status.code(),
        absl::StrCat(status.message(), "\n", absl::StripTrailingAsciiWhitespace(result.log)));
  }
  size_t size = 0;
  RETURN_IF_ERROR(
      CudaStatus(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize", context));
  result.cubin.resize(size);
  RETURN_IF_ERROR(
      CudaStatus(nvrtcGetCUBIN(program.get(), result.cubin.data()), "nvrtcGetCUBIN", context));
  if (result.cubin.empty()) {
    return absl::InternalError(absl::StrCat(context, ": NVRTC returned an empty CUBIN"));
  }
  RETURN_IF_ERROR(CudaStatus(nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize", context));
  result.ptx.resize(size);
  RETURN_IF_ERROR(
      CudaStatus(nvrtcGetPTX(program.get(), result.ptx.data()), "nvrtcGetPTX", context));
  if (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();
  result.compile_ms = MsSince(start);
  return result;
}

KernelStore::KernelStore(std::string arch, std::unique_ptr<CubinLayer> lower)
    : arch_(std::move(arch)), lower_(std::move(lower)) {}

KernelStore::~KernelStore() = default;

std::string KernelStore::Key(const KernelSource& source, absl::string_view arch) {
  static const std::string* const nvrtc_version = new std::string(NvrtcVersion());
  Sha256Hasher hasher;
  HashField(hasher, kFormatVersion);
  HashField(hasher, *nvrtc_version);
  HashField(hasher, arch);
  HashField(hasher, source.name);
  HashField(hasher, absl::StrCat(source.options.size()));
  for (const std::string& option : source.options) HashField(hasher, option);
  HashField(hasher, source.code);
  return ToHex(hasher.Finish());
}

KernelStore::Stats KernelStore::stats() const {
  Stats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  if (lower_ != nullptr) {
    const CubinLayer::Stats lower = lower_->stats();
    stats.corrupt_discarded = lower.corrupt_discarded;
    stats.lower_store_failures = lower.store_failures;
  }
  return stats;
}

std::optional<std::string> KernelStore::FindRecord(absl::string_view key, absl::string_view kind) {
  if (lower_ == nullptr) return std::nullopt;
  std::optional<KernelBinary> found = lower_->Find(key);
  if (!found.has_value() || found->name != kind || found->arch != arch_) return std::nullopt;
  return std::move(found->cubin);
}

void KernelStore::StoreRecord(absl::string_view key, absl::string_view kind, std::string record) {
  if (lower_ == nullptr) return;
  lower_->Store(key,
                KernelBinary{.name = std::string(kind), .arch = arch_, .cubin = std::move(record)});
}

KernelStore::Entry& KernelStore::EntryFor(const std::string& key) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Entry>& slot = entries_[key];
  if (slot == nullptr) slot = std::make_unique<Entry>();
  return *slot;
}

absl::Status KernelStore::EnsureBinary(const KernelSource& source, const std::string& key,
                                       Entry& entry) {
  if (entry.binary.has_value()) {
    absl::MutexLock lock(&mu_);
    ++stats_.cubin_hits;
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.cubin_misses;
  }
  if (lower_ != nullptr) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<KernelBinary> found = lower_->Find(key);
    const double lower_ms = MsSince(start);
    // A lower layer answers for a key; the name check guards against a layer that does not.
    const bool hit = found.has_value() && found->name == source.name && !found->cubin.empty();
    if (hit) entry.binary = std::move(found);
    absl::MutexLock lock(&mu_);
    stats_.lower_ms += lower_ms;
    if (hit) {
      ++stats_.lower_hits;
      return absl::OkStatus();
    }
    ++stats_.lower_misses;
  }
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(source, arch_);
  if (!compiled.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.compile_failures;
    return compiled.status();
  }
  entry.binary = KernelBinary{.name = source.name,
                              .arch = arch_,
                              .cubin = std::move(compiled->cubin),
                              .ptx = std::move(compiled->ptx)};
  double lower_ms = 0;
  if (lower_ != nullptr) {
    const auto start = std::chrono::steady_clock::now();
    lower_->Store(key, *entry.binary);
    lower_ms = MsSince(start);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.compiles;
  stats_.compile_ms += compiled->compile_ms;
  stats_.lower_ms += lower_ms;
  return absl::OkStatus();
}

absl::StatusOr<KernelBinary> KernelStore::GetBinary(const KernelSource& source) {
  const std::string key = Key(source, arch_);
  Entry& entry = EntryFor(key);
  absl::MutexLock entry_lock(&entry.mu);
  RETURN_IF_ERROR(EnsureBinary(source, key, entry));
  return *entry.binary;
}

absl::Status KernelStore::Prefetch(
    absl::Span<const KernelSource> sources,
    const std::function<void(int64_t done, int64_t total)>& on_ready) {
  const int64_t total = static_cast<int64_t>(sources.size());
  std::vector<absl::Status> statuses(sources.size());
  absl::Mutex progress_mu;
  int64_t done = 0;
  if (on_ready) on_ready(0, total);
  ParallelFor(total, HardwareThreads(), [&](int64_t i) {
    const KernelSource& source = sources[i];
    const std::string key = Key(source, arch_);
    Entry& entry = EntryFor(key);
    {
      absl::MutexLock entry_lock(&entry.mu);
      statuses[i] = EnsureBinary(source, key, entry);
    }
    if (on_ready && statuses[i].ok()) {
      absl::MutexLock lock(&progress_mu);  // One call at a time, `done` increasing.
      on_ready(++done, total);
    }
  });
  for (absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::StatusOr<CUfunction> KernelStore::GetFunction(const KernelSource& source) {
  const std::string key = Key(source, arch_);
  Entry& entry = EntryFor(key);
  // Held across the compile: a second request for this kernel waits here instead of compiling
  // it again; other kernels only share mu_, which is never held for long.
  absl::MutexLock entry_lock(&entry.mu);
  if (entry.function != nullptr) {
    absl::MutexLock lock(&mu_);
    ++stats_.memory_hits;
    return entry.function;
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.memory_misses;
  }
  RETURN_IF_ERROR(EnsureBinary(source, key, entry));

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Module> loaded = Module::Create(entry.binary->cubin);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("kernel '", source.name, "': ", loaded.status().message()));
  }
  Module module = *std::move(loaded);
  ASSIGN_OR_RETURN(CUfunction function, module.Function(source.name));
  const double load_ms = MsSince(start);
  entry.module = std::move(module);
  entry.function = function;
  absl::MutexLock lock(&mu_);
  ++stats_.loads;
  stats_.load_ms += load_ms;
  return function;
}

}  // namespace reprise::runtime
