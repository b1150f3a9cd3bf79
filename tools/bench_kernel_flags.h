// reprise-bench's kernel-tuning flags (TrainOptions::kernels): --relu_epilogues, --measure_conv,
// --narrow_conv, --own_wgrad, --measure_matmul, --ensemble_whole_step_max_models, --conv_api,
// --conv_bn_stats and --conv_sums_in_place.
#ifndef REPRISE_TOOLS_BENCH_KERNEL_FLAGS_H_
#define REPRISE_TOOLS_BENCH_KERNEL_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "reprise/trainer.h"

namespace reprise::tools {

// __FILE__ of the file that defines these flags (cli::Program::more_flags).
extern const char kBenchKernelFlagsFile[];

// The flags as KernelTuning; InvalidArgument for a --conv_api other than legacy or graph or a
// negative --residual_sums_min_elements.
absl::StatusOr<KernelTuning> KernelTuningFromFlags();

// " narrow_conv=0", " own_wgrad=1" where they differ from the defaults, for the header line.
std::string KernelFlagsText();

}  // namespace reprise::tools

#endif  // REPRISE_TOOLS_BENCH_KERNEL_FLAGS_H_
