// matmul_bias_gelu_aux (src/ops/matmul_gelu.h) through cuDNN's graph API
// (src/runtime/cudnn_gelu_product.h) instead of cuBLASLt's GELU_AUX_BIAS epilogue, where
// LoweringOptions::gelu_product_library asks it or a race chooses it (src/ops/gelu_product_race.h).
#ifndef REPRISE_SRC_OPS_GELU_PRODUCT_CUDNN_H_
#define REPRISE_SRC_OPS_GELU_PRODUCT_CUDNN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cudnn_gelu_product.h"
#include "src/runtime/lt_matmul.h"

namespace reprise::ops {

// The product as cuDNN's GELU graph takes it; Unimplemented (naming `where`) for a batched product
// or a shape or type cuDNN's graph cannot take (runtime::GeluProductShapeSupported).
absl::StatusOr<runtime::GeluProductShape> CudnnGeluProductShape(const runtime::MatmulShape& shape,
                                                                absl::string_view where);

// The node's product on cuDNN's plan for its shape: the one named `plan_name` (a record's), else
// chosen by timing where options.measure_matmul_algorithms says so, else cuDNN's first.
// Unimplemented where cuDNN takes neither the types nor the shape, or has no plan that fits the
// lane's workspace: the caller then runs cuBLASLt's epilogue and says why in its description;
// kNotFound where no candidate has the name. Inputs A, B, bias; outputs gelu, pre.
struct CudnnGeluLowering {
  std::unique_ptr<GpuKernel> kernel;
  std::string engine;  // cuDNN's name for the plan, as a record keeps it.
};
absl::StatusOr<CudnnGeluLowering> LowerCudnnGeluProduct(const LoweringContext& ctx,
                                                        const Node& node,
                                                        const runtime::MatmulShape& shape,
                                                        absl::string_view plan_name = "");

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_GELU_PRODUCT_CUDNN_H_
