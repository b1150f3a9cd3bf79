// A GELU layer's forward product (matmul_bias_gelu_aux) where both libraries can run it and the
// lowering measures (measure_matmul_algorithms, with KernelTuning::gelu_product_library's default
// kFastest): cuDNN's measured graph-API plan (src/ops/gelu_product_cudnn.h) and cuBLASLt's
// measured GELU_AUX_BIAS epilogue, timed in turns on the node's own buffers
// (src/ops/kernel_timing.h); the faster runs.
// The outcome is recorded beside cuBLASLt's measured choices (runtime::kGeluProductRecordKind,
// keyed by the product, the workspace limit, the GPU and both libraries' versions), so that a
// later process with the same product takes it from the record, times nothing and gives the same
// bits. A race and a recorded outcome count in MatmulChoices() as one choice each.
#ifndef REPRISE_SRC_OPS_GELU_PRODUCT_RACE_H_
#define REPRISE_SRC_OPS_GELU_PRODUCT_RACE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/lt_matmul.h"

namespace reprise::ops {

// The node's product on the faster library, its description ending with both times (or, from a
// record, the winner's). Where cuDNN has no plan for the shape or fails to build one, cuBLASLt's
// epilogue with cuDNN's reason; where cuBLASLt has no epilogue algorithm, cuDNN's plan; where
// neither has one, cuBLASLt's kNotFound (the caller then runs the product and GELU apart).
absl::StatusOr<std::unique_ptr<GpuKernel>> RaceGeluProduct(const LoweringContext& ctx,
                                                           const Node& node,
                                                           const runtime::MatmulShape& shape,
                                                           const runtime::MatmulEpilogue& epilogue);

// "cuDNN: <why>", at most about 200 characters of it: the note a cuBLASLt kernel carries where
// cuDNN was asked for and refused the shape.
std::string CudnnRefusalNote(const absl::Status& refusal);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_GELU_PRODUCT_RACE_H_
