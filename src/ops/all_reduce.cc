#include "src/ops/all_reduce.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/parallel/communicator.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferAllReduce(const Attrs&,
                                                       absl::Span<const TensorSpec> in) {
  if (in.empty()) return absl::InvalidArgumentError("expected at least one tensor");
  for (size_t i = 0; i < in.size(); ++i) {
    const DType d = in[i].dtype;
    if (d != DType::kFloat32 && d != DType::kBFloat16 && d != DType::kFloat16 &&
        d != DType::kFloat64) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " is ", in[i].ToString(), "; expected a float type"));
    }
    if (d != in[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " is ", in[i].ToString(),
                                                     " but tensor 0 is ", in[0].ToString(),
                                                     ": one collective reduces one type"));
    }
  }
  return std::vector<TensorSpec>(in.begin(), in.end());
}

absl::Status CpuAllReduce(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  for (size_t i = 0; i < in.size(); ++i) {
    std::memcpy(out[i]->raw(), in[i]->raw(), in[i]->spec().bytes());
  }
  return absl::OkStatus();
}

// One collective over the bucket's contiguous bytes, padding between tensors included: the
// padding of the inputs is averaged into the padding of the outputs, which nothing reads.
class AllReduceKernel : public GpuKernel {
 public:
  AllReduceKernel(parallel::Communicator* comm, const void* send, void* recv, int64_t count,
                  DType dtype, int tensors, std::string node_name)
      : comm_(comm),
        send_(send),
        recv_(recv),
        count_(count),
        dtype_(dtype),
        tensors_(tensors),
        node_name_(std::move(node_name)) {}
  absl::Status Launch(cudaStream_t stream) const override {
    return comm_->AllReduceAverage(send_, recv_, count_, dtype_, stream,
                                   absl::StrCat("node '", node_name_, "'"));
  }
  std::string Describe() const override {
    return absl::StrCat("all_reduce average of ", count_, " ", DTypeName(dtype_), " (", tensors_,
                        " tensors) over ", comm_->world_size(), " ranks");
  }

 private:
  parallel::Communicator* comm_;
  const void* send_;
  void* recv_;
  int64_t count_;
  DType dtype_;
  int tensors_;
  std::string node_name_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAllReduce(const LoweringContext& ctx,
                                                          const Node& node) {
  if (ctx.communicator == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "op 'all_reduce' node '", node.name,
        "' needs a communicator: the trainer has no TrainOptions::parallel.data_parallel"));
  }
  const DType dtype = ctx.input_specs[0].dtype;
  if (dtype == DType::kFloat64) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "': all_reduce of f64 has no GPU lowering"));
  }
  // The memory plan's contract: tensor i sits at the same distance from tensor 0 among the inputs
  // as among the outputs, each after the previous one within one alignment step.
  const char* in0 = static_cast<const char*>(ctx.inputs[0]);
  const char* out0 = static_cast<const char*>(ctx.outputs[0]);
  int64_t end = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const int64_t at = static_cast<const char*>(ctx.inputs[i]) - in0;
    const int64_t out_at = static_cast<const char*>(ctx.outputs[i]) - out0;
    constexpr int64_t kMostPadding = 256;
    if (at != out_at || at < end || at - end >= kMostPadding || at % DTypeSize(dtype) != 0) {
      return absl::InternalError(absl::StrCat(
          "node '", node.name,
          "': the memory plan did not lay out the bucket contiguously (tensor ", i, " at +", at,
          " among the inputs, +", out_at, " among the outputs; the previous ends at +", end, ")"));
    }
    end = at + ctx.input_specs[i].bytes();
  }
  return std::unique_ptr<GpuKernel>(
      new AllReduceKernel(ctx.communicator, in0, ctx.outputs[0], end / DTypeSize(dtype), dtype,
                          static_cast<int>(ctx.inputs.size()), node.name));
}

}  // namespace

const ir::OpDef& AllReduceOp() {
  static const ir::OpDef op{.name = "all_reduce",
                            .kind = ir::OpKind::kCommunication,
                            .infer = InferAllReduce,
                            .cpu = CpuAllReduce,
                            .lower = LowerAllReduce,
                            .low_precision = true};
  return op;
}

}  // namespace reprise::ops
