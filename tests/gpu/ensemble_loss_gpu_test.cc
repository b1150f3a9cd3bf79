// An ensemble's softmax cross-entropy on the GPU (batched_softmax_cross_entropy, its gradient and
// the fused pair: logits [K, B, C], a loss per model), which runs on one model's row kernels over
// the K·B rows, in float32 and bfloat16: each op against the CPU reference (relative L2 1e-5 and
// 1e-2), with a dloss of its own per model and with padding columns left out (their gradient
// exactly 0); the fused pair giving the separate ops' bits and the total the models' losses added
// in order, on every run; and model k giving the bits that one model's op gives its [B, C] slice
// wherever that op takes the row kernels too and model k's slice keeps its rows' 4-element
// boundaries (elsewhere within rounding: relative 1e-5, bfloat16 1e-2). The fused pair's time at
// ensemble sizes is printed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/codegen/loss_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batched.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/node_timing.h"

namespace reprise {
namespace {

struct Case {
  int64_t models, rows, cols, classes;
};

// Narrow rows (one model's one-block sizes, unaligned row starts), whole vectors (the one-pass
// kernel), a wide vocabulary, padding columns, and batches past the one-block kernels' 12,288 rows.
std::vector<Case> Cases() {
  return {{3, 37, 50, 50}, {4, 32, 64, 64},    {2, 67, 5003, 5003},
          {3, 37, 64, 50}, {2, 9, 5120, 5003}, {2, 13000, 8, 7}};
}

std::string Name(const Case& c) {
  return absl::StrCat(c.models, "x", c.rows, "x", c.cols, " classes ", c.classes);
}

bool SameBits(const ir::HostTensor& a, const ir::HostTensor& b) {
  return a.spec() == b.spec() && std::memcmp(a.raw(), b.raw(), a.spec().bytes()) == 0;
}

// Labels 0 and classes - 1 in every model, others in between differing by model.
std::vector<int32_t> Labels(const Case& c) {
  std::vector<int32_t> labels(c.models * c.rows);
  for (int64_t k = 0; k < c.models; ++k) {
    for (int64_t r = 0; r < c.rows; ++r) {
      labels[k * c.rows + r] = static_cast<int32_t>(r == 0   ? 0
                                                    : r == 1 ? c.classes - 1
                                                             : (r * 7919 + k * 31) % c.classes);
    }
  }
  return labels;
}

Attrs ClassesAttr(const Case& c) {
  Attrs attrs;
  if (c.classes < c.cols) attrs[ops::kLossClassesAttr] = c.classes;
  return attrs;
}

struct EnsembleXent {
  Graph g;
  // The loss op, the gradient op (a dloss of its own per model), the fused pair (loss, total,
  // gradient), and the gradient op with every model's dloss the fused pair's dtotal.
  Value loss, grad, fused_loss, total, fused_grad, grad_of_total;
};

EnsembleXent BuildEnsembleXent(const Case& c, DType dtype) {
  EnsembleXent x;
  Graph& g = x.g;
  const Shape logits{c.models, c.rows, c.cols};
  Value z = *g.AddConstant("z", {logits, dtype}, Initializer::Uniform(-8, 8));
  Value labels = *g.AddInput("labels", {Shape{c.models, c.rows}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{c.models}}, Initializer::Uniform(0.5, 4));
  Value dtotal = *g.AddConstant("dtotal", {Shape{}}, Initializer::Constant(3.0));
  Value dtotal_each = *g.AddConstant("dtotal_each", {Shape{c.models}}, Initializer::Constant(3.0));
  const Attrs attrs = ClassesAttr(c);
  x.loss = *g.AddOp1(ops::BatchedSoftmaxCrossEntropyOp(), "loss", {z, labels}, attrs);
  x.grad = *g.AddOp1(ops::BatchedSoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss}, attrs);
  std::vector<Value> both =
      *g.AddOp(ops::BatchedSoftmaxCrossEntropyWithGradOp(), "both", {z, labels, dtotal}, attrs);
  x.fused_loss = both[0];
  x.total = both[1];
  x.fused_grad = both[2];
  x.grad_of_total = *g.AddOp1(ops::BatchedSoftmaxCrossEntropyGradOp(), "grad_of_total",
                              {z, labels, dtotal_each}, attrs);
  return x;
}

class EnsembleLossGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(EnsembleLossGpuTest, LossGradientAndFusedPairMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Name(c));
    EnsembleXent x = BuildEnsembleXent(c, dtype);
    ir::ReferenceExecutor cpu(x.g, false, 21);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(c)).ok());
    ExpectGpuMatchesCpu(x.g, cpu, dtype == DType::kFloat32 ? 1e-5 : 1e-2);
    // Padding columns: a gradient of exactly 0 (the relative error above would not see a tiny
    // one).
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> got,
                                 RunOnGpu(x.g, cpu, {x.grad, x.fused_grad}));
    int64_t nonzero = 0;
    for (const ir::HostTensor& dz : got) {
      for (int64_t row = 0; row < c.models * c.rows; ++row) {
        for (int64_t col = c.classes; col < c.cols; ++col) {
          nonzero += ir::FloatElement(dz, row * c.cols + col) != 0;
        }
      }
    }
    EXPECT_EQ(nonzero, 0);
  }
}

// The fused pair's losses have the loss op's bits, its gradient the gradient op's with dtotal as
// every model's dloss, its total the losses added in model order; a second run gives the same
// bits.
TEST_P(EnsembleLossGpuTest, FusedPairHasTheSeparateOpsBitsOnEveryRun) {
  REPRISE_REQUIRE_GPU();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Name(c));
    EnsembleXent x = BuildEnsembleXent(c, GetParam());
    ir::ReferenceExecutor cpu(x.g, false, 22);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(c)).ok());
    const std::vector<Value> fetch = {x.loss,  x.grad,       x.fused_loss,
                                      x.total, x.fused_grad, x.grad_of_total};
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> first, RunOnGpu(x.g, cpu, fetch));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> second, RunOnGpu(x.g, cpu, fetch));
    EXPECT_TRUE(SameBits(first[0], first[2]));
    EXPECT_TRUE(SameBits(first[4], first[5]));
    float total = 0.0f;
    for (int64_t k = 0; k < c.models; ++k) total += first[0].data<float>()[k];
    EXPECT_EQ(std::memcmp(&total, first[3].raw(), sizeof(float)), 0)
        << total << " against " << first[3].data<float>()[0];
    for (size_t i = 0; i < fetch.size(); ++i) EXPECT_TRUE(SameBits(first[i], second[i])) << i;
  }
}

// Model k of the ensemble against one model's ops on its own slices (z[k], labels[k], dloss[k]).
TEST_P(EnsembleLossGpuTest, EachModelHasItsOwnRunsBits) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Name(c));
    Graph g;
    const Attrs attrs = ClassesAttr(c);
    Value z = *g.AddInput("z", {Shape{c.models, c.rows, c.cols}, dtype});
    Value labels = *g.AddInput("labels", {Shape{c.models, c.rows}, DType::kInt32});
    Value dloss = *g.AddInput("dloss", {Shape{c.models}});
    std::vector<Value> fetch = {
        *g.AddOp1(ops::BatchedSoftmaxCrossEntropyOp(), "loss", {z, labels}, attrs),
        *g.AddOp1(ops::BatchedSoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss}, attrs)};
    for (int64_t k = 0; k < c.models; ++k) {
      const std::string m = absl::StrCat(k);
      Value zk = *g.AddInput("z" + m, {Shape{c.rows, c.cols}, dtype});
      Value lk = *g.AddInput("labels" + m, {Shape{c.rows}, DType::kInt32});
      Value dk = *g.AddInput("dloss" + m, {Shape{}});
      fetch.push_back(*g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss" + m, {zk, lk}, attrs));
      fetch.push_back(*g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "grad" + m, {zk, lk, dk}, attrs));
    }
    ir::ReferenceExecutor cpu(g, false, 23);
    std::mt19937 rng(static_cast<uint32_t>(c.cols));
    std::uniform_real_distribution<float> logit(-8.0f, 8.0f), scale(0.5f, 4.0f);
    std::vector<double> zs(c.models * c.rows * c.cols), ds(c.models);
    for (double& v : zs) v = logit(rng);
    for (double& v : ds) v = scale(rng);
    const std::vector<int32_t> ls = Labels(c);
    REPRISE_ASSERT_OK(cpu.SetLeaf("z", zs));
    REPRISE_ASSERT_OK(cpu.SetLeaf("labels", ls));
    REPRISE_ASSERT_OK(cpu.SetLeaf("dloss", ds));
    const int64_t per_model = c.rows * c.cols;
    for (int64_t k = 0; k < c.models; ++k) {
      const std::string m = absl::StrCat(k);
      REPRISE_ASSERT_OK(
          cpu.SetLeaf("z" + m, absl::MakeConstSpan(zs).subspan(k * per_model, per_model)));
      REPRISE_ASSERT_OK(
          cpu.SetLeaf("labels" + m, absl::MakeConstSpan(ls).subspan(k * c.rows, c.rows)));
      REPRISE_ASSERT_OK(cpu.SetLeaf("dloss" + m, absl::MakeConstSpan(ds).subspan(k, 1)));
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> got, RunOnGpu(g, cpu, fetch));
    // One model's small float32 losses take the one-block kernels: agreement to rounding there,
    // the same bits where it takes the row kernels as the ensemble does and model k's slice starts
    // on a 4-element boundary (a row kernel splits its row at such boundaries, counted from the
    // tensor's start, and the split orders the row's sums).
    const bool same_bits =
        (c.classes < c.cols || codegen::UseRowPerBlockLoss(c.rows, c.cols, dtype)) &&
        c.rows * c.cols % 4 == 0;
    const double tolerance = dtype == DType::kFloat32 ? 1e-5 : 1e-2;
    const size_t grad_bytes = per_model * DTypeSize(dtype);
    for (int64_t k = 0; k < c.models; ++k) {
      const float batched_loss = got[0].data<float>()[k];
      const float own_loss = got[2 + 2 * k].data<float>()[0];
      const ir::HostTensor& own_grad = got[3 + 2 * k];
      if (same_bits) {
        EXPECT_EQ(std::memcmp(&batched_loss, &own_loss, sizeof(float)), 0)
            << "model " << k << ": " << batched_loss << " against " << own_loss;
        EXPECT_EQ(std::memcmp(static_cast<const char*>(got[1].raw()) + k * grad_bytes,
                              own_grad.raw(), grad_bytes),
                  0)
            << "model " << k;
        continue;
      }
      EXPECT_NEAR(batched_loss, own_loss, 1e-5f * std::fabs(own_loss)) << "model " << k;
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < per_model; ++i) {
        const double mine = ir::FloatElement(got[1], k * per_model + i);
        const double own = ir::FloatElement(own_grad, i);
        diff += (mine - own) * (mine - own);
        norm += own * own;
      }
      EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm)) << "model " << k;
    }
  }
}

// The fused pair's time at ensemble sizes (a classifier's narrow rows, and a wide head), beside
// one model's at one model's slice, printed for the record: speed is measured, not asserted.
TEST(EnsembleLossTimingGpuTest, FusedPairBesideOneModel) {
  REPRISE_REQUIRE_GPU();
  for (const Case& c :
       std::vector<Case>{{32, 64, 10, 10}, {128, 256, 10, 10}, {8, 512, 1000, 1000}}) {
    Graph g;
    Value z = *g.AddInput("z", {Shape{c.models, c.rows, c.cols}});
    Value labels = *g.AddInput("labels", {Shape{c.models, c.rows}, DType::kInt32});
    Value dtotal = *g.AddInput("dtotal", {Shape{}});
    Value zk = *g.AddInput("zk", {Shape{c.rows, c.cols}});
    Value lk = *g.AddInput("lk", {Shape{c.rows}, DType::kInt32});
    ASSERT_TRUE(
        g.AddOp(ops::BatchedSoftmaxCrossEntropyWithGradOp(), "ensemble", {z, labels, dtotal}).ok());
    ASSERT_TRUE(g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "one", {zk, lk, dtotal}).ok());
    REPRISE_ASSERT_OK_AND_ASSIGN(const double ensemble_ms, TimeNodeMs(g, "ensemble", 50));
    REPRISE_ASSERT_OK_AND_ASSIGN(const double one_ms, TimeNodeMs(g, "one", 50));
    std::printf(
        "ensemble xent with grad [%lld, %lld, %lld]: %.4f ms; one model's [%lld, %lld]: %.4f ms\n",
        static_cast<long long>(c.models), static_cast<long long>(c.rows),
        static_cast<long long>(c.cols), ensemble_ms, static_cast<long long>(c.rows),
        static_cast<long long>(c.cols), one_ms);
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, EnsembleLossGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace reprise
