// sgd_momentum: PyTorch's SGD with momentum and weight decay, updating w and v in place.
#include <algorithm>

#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferSgd(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 6));
  RETURN_IF_ERROR(CheckDType(in[0], DType::kFloat32, "weight"));
  if (!(in[1] == in[0]) || !(in[2] == in[0])) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", in[0].ToString(), ", gradient ",
                                                   in[1].ToString(), " and velocity ",
                                                   in[2].ToString(), " must match"));
  }
  for (int i = 3; i < 6; ++i) {
    if (in[i].shape.rank() != 0 || in[i].dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameter ", i, " must be an f32 scalar, got ", in[i].ToString()));
    }
  }
  return std::vector<TensorSpec>{};
}

absl::Status CpuSgd(const Node&, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const>) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto w = in[0]->data<T>(), g = in[1]->data<T>(), v = in[2]->data<T>();
    const T lr = in[3]->data<T>()[0], mu = in[4]->data<T>()[0], wd = in[5]->data<T>()[0];
    for (size_t i = 0; i < w.size(); ++i) {
      // Separate roundings, no fused multiply-add: the kernel computes the same bits.
      const T grad = g[i] + wd * w[i];
      const T vel = mu * v[i] + grad;
      v[i] = vel;
      w[i] = w[i] - lr * vel;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgd(const LoweringContext& ctx, const Node& node) {
  const int64_t n = ctx.input_specs[0].NumElements();
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  args.Add(static_cast<long long>(n));
  return NvrtcKernel::Create(ctx, node.name, codegen::SgdMomentum(), GridFor(n, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

// sgd_momentum_multi: the updates of many tensors, grouped kSgdTableSize to a launch.
absl::StatusOr<int64_t> TensorCount(const Attrs& attrs, int num_inputs) {
  ASSIGN_OR_RETURN(int64_t tensors, ir::IntAttr(attrs, "tensors"));
  if (tensors < 1 || num_inputs != 3 * tensors + 3) {
    return absl::InvalidArgumentError(absl::StrCat("expected 3 inputs per tensor for ", tensors,
                                                   " tensors plus 3 hyperparameters, got ",
                                                   num_inputs, " inputs"));
  }
  return tensors;
}

std::vector<int> MultiMutated(const Attrs& attrs, int num_inputs) {
  std::vector<int> mutated;
  for (int t = 0; t < (num_inputs - 3) / 3; ++t) {
    mutated.push_back(3 * t);
    mutated.push_back(3 * t + 2);
  }
  (void)attrs;
  return mutated;
}

// The three inputs of tensor t followed by the shared hyperparameters: one sgd_momentum's view.
template <typename T>
std::vector<T> SingleInputs(absl::Span<T const> in, int64_t t) {
  const size_t h = in.size() - 3;
  return {in[3 * t], in[3 * t + 1], in[3 * t + 2], in[h], in[h + 1], in[h + 2]};
}

absl::StatusOr<std::vector<TensorSpec>> InferSgdMulti(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(attrs, static_cast<int>(in.size())));
  for (int64_t t = 0; t < tensors; ++t) {
    const std::vector<TensorSpec> single = SingleInputs(in, t);
    auto checked = InferSgd({}, single);
    if (!checked.ok()) {
      return absl::Status(checked.status().code(),
                          absl::StrCat("tensor ", t, ": ", checked.status().message()));
    }
  }
  return std::vector<TensorSpec>{};
}

absl::Status CpuSgdMulti(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(node.attrs, static_cast<int>(in.size())));
  for (int64_t t = 0; t < tensors; ++t) {
    const std::vector<ir::HostTensor*> single = SingleInputs(in, t);
    RETURN_IF_ERROR(CpuSgd(node, single, out));
  }
  return absl::OkStatus();
}

// One NVRTC launch per table of tensors.
class LaunchSequence : public GpuKernel {
 public:
  explicit LaunchSequence(std::vector<std::unique_ptr<GpuKernel>> parts)
      : parts_(std::move(parts)) {}
  absl::Status Launch(cudaStream_t stream) const override {
    for (const auto& part : parts_) RETURN_IF_ERROR(part->Launch(stream));
    return absl::OkStatus();
  }
  std::string Describe() const override {
    std::string out;
    for (const auto& part : parts_)
      absl::StrAppend(&out, out.empty() ? "" : "; ", part->Describe());
    return out;
  }
  std::vector<std::string> GeneratedKernelNames() const override {
    std::vector<std::string> names;
    for (const auto& part : parts_) {
      for (std::string& name : part->GeneratedKernelNames()) names.push_back(std::move(name));
    }
    return names;
  }

 private:
  std::vector<std::unique_ptr<GpuKernel>> parts_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgdMulti(const LoweringContext& ctx,
                                                         const Node& node) {
  constexpr int kTable = codegen::kSgdTableSize;
  struct Table {
    void* w[kTable];
    void* g[kTable];
    void* v[kTable];
    long long n[kTable];
  };
  ASSIGN_OR_RETURN(int64_t tensors, TensorCount(node.attrs, static_cast<int>(ctx.inputs.size())));
  const size_t h = ctx.inputs.size() - 3;
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < tensors; first += kTable) {
    Table table = {};
    const int count = static_cast<int>(std::min<int64_t>(kTable, tensors - first));
    int64_t largest = 1;
    for (int i = 0; i < count; ++i) {
      const int64_t t = first + i;
      table.w[i] = ctx.inputs[3 * t];
      table.g[i] = ctx.inputs[3 * t + 1];
      table.v[i] = ctx.inputs[3 * t + 2];
      table.n[i] = ctx.input_specs[3 * t].NumElements();
      largest = std::max<int64_t>(largest, table.n[i]);
    }
    KernelArgs args;
    args.AddBytes(&table, sizeof(table));
    args.Add(ctx.inputs[h]).Add(ctx.inputs[h + 1]).Add(ctx.inputs[h + 2]);
    dim3 grid = GridFor(largest, 256, *ctx.device);
    grid.y = count;
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::SgdMomentumMulti(), grid,
                                         dim3(256), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  if (parts.size() == 1) return std::move(parts[0]);
  return std::unique_ptr<GpuKernel>(new LaunchSequence(std::move(parts)));
}

}  // namespace

const ir::OpDef& SgdMomentumMultiOp() {
  static const ir::OpDef op{.name = "sgd_momentum_multi",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSgdMulti,
                            .cpu = CpuSgdMulti,
                            .lower = LowerSgdMulti,
                            .mutated_inputs_of = MultiMutated};
  return op;
}

const ir::OpDef& SgdMomentumOp() {
  static const ir::OpDef op{.name = "sgd_momentum",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSgd,
                            .cpu = CpuSgd,
                            .lower = LowerSgd,
                            .mutated_inputs = {0, 2}};
  return op;
}

}  // namespace reprise::ops
