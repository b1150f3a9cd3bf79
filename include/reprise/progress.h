// Progress of a long operation, reported through an optional callback: for now Trainer::Create's
// kernel compilation (TrainOptions::on_compile_progress), which can take tens of seconds on a cold
// kernel cache.
//
//   options.on_compile_progress = [](const reprise::CompileProgress& p) {
//     if (p.elapsed_s > 1) std::fprintf(stderr, "\rkernels %lld/%lld", p.done, p.total);
//   };
#ifndef REPRISE_PROGRESS_H_
#define REPRISE_PROGRESS_H_

#include <cstdint>
#include <functional>

namespace reprise {

struct CompileProgress {
  // Kernels the plan needs that are ready (compiled now, or found in memory or on disk), of
  // `total`. The first call has done == 0, the last done == total (unless one failed to compile).
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;  // Since the kernels began to be acquired.
};

// Called one call at a time (possibly from a compiling thread, never concurrently), `done`
// increasing, per Trainer (data-parallel ranks created together may report concurrently). It
// must not call back into the Trainer being created.
using CompileProgressCallback = std::function<void(const CompileProgress&)>;

}  // namespace reprise

#endif  // REPRISE_PROGRESS_H_
