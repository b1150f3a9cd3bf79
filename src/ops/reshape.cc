// flatten and reshape (declared in pooling.h): the same elements in the same stored order under a
// new shape. The output has its own buffer, so the GPU lowering is one device-to-device copy.
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferFlatten(const Attrs&,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  if (in[0].shape.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must have rank 2 or more to flatten, got ", in[0].ToString()));
  }
  int64_t features = 1;
  for (int i = 1; i < in[0].shape.rank(); ++i) features *= in[0].shape.dim(i);
  return std::vector<TensorSpec>{{Shape{in[0].shape.dim(0), features}, in[0].dtype}};
}

// The "shape" attr, e.g. "32,2048,1,1".
absl::StatusOr<Shape> ShapeAttr(const Attrs& attrs) {
  auto it = attrs.find("shape");
  const std::string* text = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (text == nullptr) {
    return absl::InvalidArgumentError(
        "attribute 'shape' must be a string of comma-separated extents, e.g. \"32,2048,1,1\"");
  }
  std::vector<int64_t> dims;
  if (!absl::StripAsciiWhitespace(*text).empty()) {
    for (absl::string_view part : absl::StrSplit(*text, ',')) {
      int64_t extent = 0;
      if (!absl::SimpleAtoi(part, &extent) || extent < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("attribute 'shape' \"", *text,
                         "\" must list non-negative integers, separated by commas"));
      }
      dims.push_back(extent);
    }
  }
  return Shape(std::move(dims));
}

absl::StatusOr<std::vector<TensorSpec>> InferReshape(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(Shape shape, ShapeAttr(attrs));
  if (shape.NumElements() != in[0].NumElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape x ", in[0].ToString(), " (", in[0].NumElements(),
                     " elements) to ", shape.ToString(), " (", shape.NumElements(), " elements)"));
  }
  return std::vector<TensorSpec>{{std::move(shape), in[0].dtype}};
}

// Both gradients: dy reshaped back to x's shape.
absl::StatusOr<std::vector<Value>> GradReshape(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (!needs[0]) return grads;
  const Shape& x = g.spec(node.inputs[0]).shape;
  ASSIGN_OR_RETURN(grads[0], g.AddOp1(ReshapeOp(), absl::StrCat(node.name, ".grad"), {dout[0]},
                                      {{"shape", absl::StrJoin(x.dims(), ",")}}));
  return grads;
}

absl::Status CpuCopy(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  if (in[0]->spec().bytes() != out[0]->spec().bytes()) {
    return absl::InternalError(absl::StrCat("input ", in[0]->spec().ToString(), " and output ",
                                            out[0]->spec().ToString(), " differ in bytes"));
  }
  std::memcpy(out[0]->raw(), in[0]->raw(), in[0]->spec().bytes());
  return absl::OkStatus();
}

// One device-to-device copy: capturable as a memcpy node, no allocation, no synchronisation.
class DeviceCopy : public GpuKernel {
 public:
  DeviceCopy(std::string node_name, const void* src, void* dst, int64_t bytes)
      : node_name_(std::move(node_name)), src_(src), dst_(dst), bytes_(bytes) {}

  absl::Status Launch(cudaStream_t stream) const override {
    if (bytes_ == 0) return absl::OkStatus();
    return runtime::CudaStatus(
        cudaMemcpyAsync(dst_, src_, static_cast<size_t>(bytes_), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync(device to device)", absl::StrCat("node '", node_name_, "'"));
  }
  std::string Describe() const override { return absl::StrCat("memcpy d2d ", bytes_, " bytes"); }

 private:
  std::string node_name_;
  const void* src_;
  void* dst_;
  int64_t bytes_;
};

// Copies are byte-exact, so any element type lowers (the ops say so for bfloat16).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCopy(const LoweringContext& ctx, const Node& node) {
  return std::unique_ptr<GpuKernel>(
      new DeviceCopy(node.name, ctx.inputs[0], ctx.outputs[0], ctx.input_specs[0].bytes()));
}

}  // namespace

const ir::OpDef& FlattenOp() {
  static const ir::OpDef op{.name = "flatten",
                            .infer = InferFlatten,
                            .grad = GradReshape,
                            .cpu = CpuCopy,
                            .lower = LowerCopy,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& ReshapeOp() {
  static const ir::OpDef op{.name = "reshape",
                            .infer = InferReshape,
                            .grad = GradReshape,
                            .cpu = CpuCopy,
                            .lower = LowerCopy,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
