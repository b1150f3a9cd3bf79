#include "src/ops/lt_matmul_kernel.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reprise::ops {
namespace {

class LtMatmulKernel : public GpuKernel {
 public:
  LtMatmulKernel(std::string node_name, runtime::LtMatmul matmul, const LoweringContext& ctx)
      : node_name_(std::move(node_name)),
        matmul_(std::move(matmul)),
        a_(ctx.inputs[0]),
        b_(ctx.inputs[1]),
        c_(ctx.outputs[0]),
        workspace_(ctx.workspace) {}

  absl::Status Launch(cudaStream_t stream) const override {
    absl::Status status = matmul_.Run(stream, a_, b_, c_, workspace_);
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("node '", node_name_, "': ", status.message()));
  }
  std::string Describe() const override { return absl::StrCat("cublasLt ", matmul_.Describe()); }

 private:
  std::string node_name_;
  runtime::LtMatmul matmul_;
  const void* a_;
  const void* b_;
  void* c_;
  void* workspace_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerLtMatmul(const LoweringContext& ctx,
                                                         const Node& node,
                                                         const runtime::MatmulShape& shape,
                                                         const runtime::MatmulEpilogue& epilogue) {
  auto matmul =
      runtime::LtMatmul::Create(*ctx.lt, shape, ctx.allow_tf32, ctx.workspace_bytes, epilogue);
  if (!matmul.ok()) {
    return absl::Status(matmul.status().code(),
                        absl::StrCat("node '", node.name, "': ", matmul.status().message()));
  }
  return std::unique_ptr<GpuKernel>(new LtMatmulKernel(node.name, *std::move(matmul), ctx));
}

}  // namespace reprise::ops
