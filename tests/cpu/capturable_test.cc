// No eager fallback: a plan with an op whose GPU lowering cannot be captured into a CUDA graph is
// refused at Trainer::Create, before the device is touched, naming the op, the node and why.
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/passes/plan.h"
#include "src/runtime/cuda_status.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Test-only op, known to this binary alone: y = x, copied on the GPU with a plain cudaMemcpy,
// which runs on the legacy default stream and waits for the host, so stream capture refuses it.
absl::StatusOr<std::vector<TensorSpec>> InferCopy(const Attrs&, absl::Span<const TensorSpec> in) {
  if (in.size() != 1) return absl::InvalidArgumentError("takes one input");
  return std::vector<TensorSpec>{in[0]};
}

absl::Status CpuCopy(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  std::memcpy(out[0]->raw(), in[0]->raw(), in[0]->spec().bytes());
  return absl::OkStatus();
}

class LegacyStreamCopy : public ops::GpuKernel {
 public:
  LegacyStreamCopy(void* to, const void* from, size_t bytes)
      : to_(to), from_(from), bytes_(bytes) {}
  absl::Status Launch(cudaStream_t) const override {
    return runtime::CudaStatus(cudaMemcpy(to_, from_, bytes_, cudaMemcpyDeviceToDevice),
                               "cudaMemcpy", "legacy_stream_copy");
  }
  std::string Describe() const override { return absl::StrCat("cudaMemcpy ", bytes_, " bytes"); }

 private:
  void* to_;
  const void* from_;
  size_t bytes_;
};

absl::StatusOr<std::unique_ptr<ops::GpuKernel>> LowerCopy(const ops::LoweringContext& ctx,
                                                          const Node&) {
  return std::make_unique<LegacyStreamCopy>(ctx.outputs[0], ctx.inputs[0],
                                            ctx.input_specs[0].bytes());
}

const ir::OpDef& LegacyStreamCopyOp() {
  static const ir::OpDef op{
      .name = "test_legacy_stream_copy",
      .infer = InferCopy,
      .cpu = CpuCopy,
      .lower = LowerCopy,
      .capture = {.capturable = false,
                  .reason = "copies with cudaMemcpy on the legacy default stream"}};
  return op;
}

// Test-only op with a CPU reference and no GPU lowering at all.
const ir::OpDef& CpuOnlyCopyOp() {
  static const ir::OpDef op{.name = "test_cpu_only_copy", .infer = InferCopy, .cpu = CpuCopy};
  return op;
}

struct Model {
  Graph graph;
  Value loss;
};

// features -> <op> "staged" -> fc -> softmax cross-entropy.
Model ModelWith(const ir::OpDef& op) {
  Model m;
  Value x = *m.graph.AddInput("features", {Shape{8, 4}, DType::kFloat32});
  Value labels = *m.graph.AddInput("labels", {Shape{8}, DType::kInt32});
  Value staged = *m.graph.AddOp1(op, "staged", {x});
  Value logits = *nn::Linear(m.graph, staged, 3, "fc");
  m.loss = *nn::SoftmaxCrossEntropy(m.graph, logits, labels);
  return m;
}

TEST(CapturableTest, CheckRefusesAnOpWhoseLoweringCannotBeCapturedNamingOpNodeAndReason) {
  const Model m = ModelWith(LegacyStreamCopyOp());
  const absl::Status status = ir::CheckCapturable(m.graph);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(
      status.message(),
      AllOf(HasSubstr("op 'test_legacy_stream_copy'"), HasSubstr("node 'staged'"),
            HasSubstr("cudaMemcpy on the legacy default stream"), HasSubstr("no eager fallback")));
}

TEST(CapturableTest, CheckRefusesAnOpWithoutGpuLowering) {
  const Model m = ModelWith(CpuOnlyCopyOp());
  const absl::Status status = ir::CheckCapturable(m.graph);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("op 'test_cpu_only_copy'"),
                                      HasSubstr("node 'staged'"), HasSubstr("no GPU lowering")));
}

// Create checks before it needs a device, so this runs (and means the same) with or without one.
TEST(CapturableTest, TrainerCreateRefusesAnUncapturableOpBeforeTouchingTheDevice) {
  const Model m = ModelWith(LegacyStreamCopyOp());
  for (ExecMode mode : {ExecMode::kGraph, ExecMode::kBulked, ExecMode::kSync}) {
    TrainOptions options;
    options.launch.mode = mode;  // Eager modes run the same plan, which must be capturable too.
    const absl::Status status = Trainer::Create(m.graph, m.loss, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("test_legacy_stream_copy"), HasSubstr("'staged'"),
                                        HasSubstr("legacy")))
        << ExecModeName(mode);
  }
  const Model cpu_only = ModelWith(CpuOnlyCopyOp());
  const absl::Status status = Trainer::Create(cpu_only.graph, cpu_only.loss, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("test_cpu_only_copy"), HasSubstr("'staged'")));
}

// Every op the engine ships has a GPU lowering that can be captured: the check refuses only what
// a test (or a user's own op) brings in.
TEST(CapturableTest, EveryShippedOpHasACapturableLowering) {
  for (const ir::OpDef* op : ops::AllOps()) {
    EXPECT_NE(op->lower, nullptr) << op->name;
    EXPECT_TRUE(op->capture.capturable) << op->name << ": " << op->capture.reason;
  }
}

// A whole training plan (backward, AdamW with clipping and a schedule, fused) passes the check.
TEST(CapturableTest, AFusedAdamWTrainingPlanIsCapturable) {
  auto mlp = models::BuildMlp({.batch = 16, .input_features = 8, .depth = 2, .width = 16});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  OptimizerOptions adamw{
      .kind = OptimizerKind::kAdamW,
      .learning_rate = 1e-3f,
      .weight_decay = 0.01f,
      .max_grad_norm = 1.0f,
      .schedule = {.warmup_steps = 10, .decay = LrDecay::kCosine, .total_steps = 100}};
  auto training = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, adamw);
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_TRUE(ir::CheckCapturable(training->graph).ok());
  auto plan = passes::BuildPlan(*std::move(training), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ir::CheckCapturable(plan->graph()).ok()) << ir::CheckCapturable(plan->graph());
}

}  // namespace
}  // namespace reprise
