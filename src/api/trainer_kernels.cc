#include "src/api/trainer_kernels.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capture/launch_profile.h"
#include "src/api/compile_options.h"
#include "src/api/input_checks.h"
#include "src/api/model_fingerprint.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/conv_kernels.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/gelu_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/layer_norm_backward_kernels.h"
#include "src/codegen/layer_norm_kernels.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/codegen/pooling_kernels.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ir/host_tensor.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/ops/attention.h"
#include "src/ops/batched.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/masked_loss.h"
#include "src/ops/mlp_step.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/transformer_ops.h"
#include "src/parallel/data_parallel_step.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/channels_last.h"
#include "src/passes/mixed_precision.h"
#include "src/runtime/cache_config.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/disk_cache.h"
#include "src/util/status_macros.h"

namespace reprise {

bool HasImages(const Graph& graph) {
  for (const Node& node : graph.nodes()) {
    for (const TensorSpec& out : node.outputs) {
      if (out.shape.rank() == 4) return true;
    }
  }
  return false;
}

namespace {

// Whether the plan runs optimizer kernels beyond plain SGD's (src/codegen/optimizer_kernels.h).
bool UsesOptimizerKernels(const Graph& graph) {
  for (const Node& node : graph.nodes()) {
    if (node.op->kind == ir::OpKind::kOptimizer && node.op != &ops::AdvanceStepOp() &&
        ((node.op != &ops::SgdMomentumOp() && node.op != &ops::SgdMomentumMultiOp()) ||
         node.attrs.contains("nesterov")))
      return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<runtime::KernelSource>> KernelsToPrefetch(const Graph& graph) {
  std::vector<runtime::KernelSource> sources;
  for (const codegen::GeneratedKernel& kernel : codegen::AllKernels()) {
    sources.push_back(ops::ToKernelSource(kernel));
  }
  for (const codegen::GeneratedKernel& kernel :
       {codegen::SoftmaxCrossEntropyWithGrad(), codegen::SgdMomentumMulti()}) {
    sources.push_back(ops::ToKernelSource(kernel));
  }
  // Adam, Nesterov, clipping, a schedule, loss scaling or the non-finite guard.
  if (UsesOptimizerKernels(graph)) {
    for (const codegen::GeneratedKernel& kernel : codegen::OptimizerKernels()) {
      sources.push_back(ops::ToKernelSource(kernel));
    }
    for (const codegen::GeneratedKernel& kernel : codegen::LossScaleKernels()) {
      sources.push_back(ops::ToKernelSource(kernel));
    }
  }
  const bool batched = std::any_of(graph.nodes().begin(), graph.nodes().end(), [](const Node& n) {
    return absl::StartsWith(n.op_name(), "batched_") || absl::StartsWith(n.op_name(), "model_");
  });
  if (batched) {  // An ensemble's batched layers (src/passes/batch_ensemble.h).
    for (const codegen::GeneratedKernel& kernel : codegen::BatchedKernels()) {
      sources.push_back(ops::ToKernelSource(kernel));
    }
  }
  if (HasImages(graph)) {  // The convolutional layers' own kernels.
    for (const auto& kernels :
         {codegen::ConvKernels(), codegen::PoolingKernels(), codegen::TransposeKernels()}) {
      for (const codegen::GeneratedKernel& kernel : kernels) {
        sources.push_back(ops::ToKernelSource(kernel));
      }
    }
  }
  const bool transformer =
      std::any_of(graph.nodes().begin(), graph.nodes().end(), [](const Node& n) {
        return n.op == &ops::LayerNormOp() || n.op == &ops::EmbeddingOp() || n.op == &ops::GeluOp();
      });
  if (transformer) {  // Layer norm, GELU and embedding kernels (src/ops/transformer_ops.h).
    for (const auto& kernels : {codegen::LayerNormKernels(), codegen::LayerNormBackwardKernels(),
                                codegen::EmbeddingKernels(), codegen::GeluKernels()}) {
      for (const codegen::GeneratedKernel& kernel : kernels) {
        sources.push_back(ops::ToKernelSource(kernel));
      }
    }
  }
  for (const Node& node : graph.nodes()) {  // Chunked optimizer kernels at their tables' sizes.
    for (const codegen::GeneratedKernel& kernel : ops::ChunkedKernelsOf(node)) {
      sources.push_back(ops::ToKernelSource(kernel));
    }
  }
  absl::flat_hash_set<std::string> sized;   // Every layer of a width launches the same kernel.
  for (const Node& node : graph.nodes()) {  // Pooling and layer-norm kernels at their shapes.
    for (const codegen::GeneratedKernel& kernel : ops::SizedPoolingKernelsOf(graph, node)) {
      sources.push_back(ops::ToKernelSource(kernel));
    }
    for (const codegen::GeneratedKernel& kernel : ops::SizedLayerNormKernelsOf(graph, node)) {
      if (sized.insert(kernel.name).second) sources.push_back(ops::ToKernelSource(kernel));
    }
  }
  for (const Node& node : graph.nodes()) {
    if (node.op != &ops::FusedPointwiseOp()) continue;
    ASSIGN_OR_RETURN(runtime::KernelSource source, ops::FusedPointwiseKernel(node));
    sources.push_back(std::move(source));
  }
  return sources;
}

std::shared_ptr<runtime::KernelStore> SharedKernelStore(const runtime::DeviceInfo& device) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* stores =
      new absl::flat_hash_map<std::string, std::shared_ptr<runtime::KernelStore>>();
  const runtime::CacheEnvironment env = runtime::CacheEnvironment::FromProcess();
  const absl::StatusOr<runtime::CacheConfig> config = runtime::ResolveCacheConfig(env);
  const std::string key = absl::StrCat(
      device.ordinal, "|", config.ok() ? (config->enabled ? config->dir : "off") : "unusable");
  absl::MutexLock lock(&mu);
  std::shared_ptr<runtime::KernelStore>& store = (*stores)[key];
  if (store == nullptr) {
    store = std::make_shared<runtime::KernelStore>(device.ArchFlag(),
                                                   runtime::DiskCacheFromEnvironment(env));
  }
  return store;
}

}  // namespace reprise
