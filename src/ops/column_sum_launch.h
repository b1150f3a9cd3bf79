// The launches of a column sum (src/codegen/column_sum_kernels.h), shared by every op that sums a
// row-major matrix's columns (column_sum, channels-last channel_sum, fused pointwise chains with a
// column sum, the fused GELU backward): the rows split over enough blocks to fill the device, with
// the blocks' partial sums in the lane's workspace and a finalize launch, or one launch where the
// lane has no workspace for them.
#ifndef REPRISE_SRC_OPS_COLUMN_SUM_LAUNCH_H_
#define REPRISE_SRC_OPS_COLUMN_SUM_LAUNCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

struct ColumnSumLaunches {
  std::vector<std::unique_ptr<GpuKernel>> kernels;  // In launch order.
  size_t workspace_bytes = 0;                       // From the start of the lane's workspace.
};

// The launches of `source` (a codegen::ColumnSumKernel) over a [rows, cols] matrix of `dtype`:
// `args` holds the kernel's leading arguments (its inputs and stored outputs, whose addresses
// are `arrays`: the four-column loads need every one aligned), and the column sums go to
// `column_sum`. The partial sums start at the lane's workspace, so a caller whose earlier launches
// use the workspace too needs max(theirs, workspace_bytes). Errors name `node_name`.
absl::StatusOr<ColumnSumLaunches> LowerColumnSums(const LoweringContext& ctx,
                                                  const std::string& node_name,
                                                  const codegen::GeneratedKernel& source,
                                                  DType dtype, KernelArgs args,
                                                  absl::Span<void* const> arrays, void* column_sum,
                                                  int64_t rows, int64_t cols);

// The launches as one GpuKernel: the kernel alone, or a KernelSequence with its workspace.
std::unique_ptr<GpuKernel> AsKernel(ColumnSumLaunches launches);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_COLUMN_SUM_LAUNCH_H_
