#include "src/ops/column_sum_launch.h"

#include <cstdint>

#include "src/codegen/column_sum_kernels.h"
#include "src/codegen/element_type.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<ColumnSumLaunches> LowerColumnSums(const LoweringContext& ctx,
                                                  const std::string& node_name,
                                                  const codegen::GeneratedKernel& source,
                                                  DType dtype, KernelArgs args,
                                                  absl::Span<void* const> arrays, void* column_sum,
                                                  int64_t rows, int64_t cols) {
  codegen::ColumnSumSplit split = codegen::ColumnSumSplitFor(rows, cols, ctx.device->sm_count);
  const int64_t partial_bytes = split.PartialBytes(cols);
  if (partial_bytes > 0 &&
      (ctx.workspace == nullptr || static_cast<size_t>(partial_bytes) > ctx.workspace_bytes)) {
    split = codegen::UnsplitColumnSum(rows, cols);  // Slower, but needs no scratch.
  }
  const bool partials = split.row_blocks > 1;
  // Four columns per load: the columns a multiple of four, every array aligned to four elements.
  bool vector = cols % 4 == 0;
  const uintptr_t alignment = 4 * codegen::ElementBytes(dtype);
  for (void* array : arrays) vector = vector && reinterpret_cast<uintptr_t>(array) % alignment == 0;
  args.Add(column_sum).Add(partials ? ctx.workspace : nullptr);
  args.Add(static_cast<long long>(rows)).Add(static_cast<long long>(cols));
  args.Add(static_cast<long long>(split.rows_per_block)).Add(vector ? 1 : 0);
  ColumnSumLaunches launches;
  ASSIGN_OR_RETURN(launches.kernels.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name, source,
                                       dim3(static_cast<unsigned>(split.column_blocks),
                                            static_cast<unsigned>(split.row_blocks)),
                                       dim3(codegen::kColumnSumBlock), 0, std::move(args)));
  if (!partials) return launches;
  KernelArgs finalize;
  finalize.Add(ctx.workspace).Add(column_sum).Add(static_cast<int>(split.row_blocks));
  finalize.Add(static_cast<long long>(cols));
  ASSIGN_OR_RETURN(
      launches.kernels.emplace_back(),
      NvrtcKernel::Create(ctx, node_name, codegen::ColumnSumFinalize(dtype),
                          dim3(static_cast<unsigned>((cols + codegen::kColumnSumBlock - 1) /
                                                     codegen::kColumnSumBlock)),
                          dim3(codegen::kColumnSumBlock), 0, std::move(finalize)));
  launches.workspace_bytes = static_cast<size_t>(partial_bytes);
  return launches;
}

std::unique_ptr<GpuKernel> AsKernel(ColumnSumLaunches launches) {
  if (launches.kernels.size() == 1 && launches.workspace_bytes == 0) {
    return std::move(launches.kernels[0]);
  }
  return std::make_unique<KernelSequence>(std::move(launches.kernels), launches.workspace_bytes);
}

}  // namespace reprise::ops
