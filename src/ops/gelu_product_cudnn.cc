#include "src/ops/gelu_product_cudnn.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/runtime/cudnn_gelu_product.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// One cuDNN execution with its plan built at lowering; Launch binds the stream and enqueues.
class CudnnGeluProductKernel : public GpuKernel {
 public:
  CudnnGeluProductKernel(std::string where, runtime::CudnnGeluProduct product,
                         const LoweringContext& ctx, const runtime::GeluProductBuffers& buffers)
      : where_(std::move(where)),
        product_(std::move(product)),
        cudnn_(ctx.cudnn),
        workspace_(ctx.workspace),
        buffers_(buffers) {}

  absl::Status Launch(cudaStream_t stream) const override {
    RETURN_IF_ERROR(cudnn_->Bind(stream, where_));
    return product_.Run(*cudnn_, buffers_, workspace_, where_);
  }
  std::string Describe() const override { return product_.Describe(); }
  size_t WorkspaceBytes() const override { return product_.workspace_bytes(); }

 private:
  std::string where_;  // "node '<name>'", for errors.
  runtime::CudnnGeluProduct product_;
  const runtime::CudnnHandle* cudnn_;
  void* workspace_;
  runtime::GeluProductBuffers buffers_;
};

}  // namespace

absl::StatusOr<runtime::GeluProductShape> CudnnGeluProductShape(const runtime::MatmulShape& shape,
                                                                absl::string_view where) {
  if (shape.batch != 1) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": batched GELU products stay on cuBLASLt"));
  }
  const runtime::GeluProductShape product_shape{.m = shape.m,
                                                .n = shape.n,
                                                .k = shape.k,
                                                .transpose_a = shape.transpose_a,
                                                .transpose_b = shape.transpose_b,
                                                .dtype = shape.dtype};
  RETURN_IF_ERROR(runtime::GeluProductShapeSupported(product_shape));
  return product_shape;
}

absl::StatusOr<CudnnGeluLowering> LowerCudnnGeluProduct(const LoweringContext& ctx,
                                                        const Node& node,
                                                        const runtime::MatmulShape& shape,
                                                        absl::string_view plan_name) {
  const std::string where = absl::StrCat("node '", node.name, "'");
  ASSIGN_OR_RETURN(const runtime::GeluProductShape product_shape,
                   CudnnGeluProductShape(shape, where));
  if (ctx.cudnn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": needs a cuDNN handle to lower"));
  }
  const runtime::GeluProductBuffers buffers{.a = ctx.inputs[0],
                                            .b = ctx.inputs[1],
                                            .bias = ctx.inputs[2],
                                            .pre = ctx.outputs[1],
                                            .out = ctx.outputs[0]};
  const runtime::GeluProductOptions options{.device = DeviceChoiceKey(ctx.device),
                                            .measure = ctx.options.measure_matmul_algorithms,
                                            .plan_name = std::string(plan_name),
                                            .buffers = buffers,
                                            .workspace = ctx.workspace,
                                            .workspace_limit = ctx.workspace_bytes};
  ASSIGN_OR_RETURN(runtime::CudnnGeluProduct product,
                   runtime::CudnnGeluProduct::Create(*ctx.cudnn, product_shape, options, where));
  std::string engine = product.engine();
  return CudnnGeluLowering{.kernel = std::unique_ptr<GpuKernel>(
                               new CudnnGeluProductKernel(where, std::move(product), ctx, buffers)),
                           .engine = std::move(engine)};
}

}  // namespace reprise::ops
