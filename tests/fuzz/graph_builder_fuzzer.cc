// libFuzzer target: the public graph-building API (reprise/graph.h, nn.h, nn_attention.h,
// models.h) driven with random shapes, dtypes, layers, ops of the engine's table with random
// attributes, model configs (MLP, ensembles, ResNet, GPT-2) and names. Every call either succeeds,
// leaving values whose element counts and byte sizes fit in int64, or fails leaving the graph
// exactly as it was. A small graph then runs on the CPU reference with random inputs (NaN,
// labels out of range, ...), and a scalar loss goes through the step compiler (CompileStep:
// autodiff, optimizer, mirror, fuse, schedule, memory plan) with random options; a small training
// graph runs on the CPU reference too. Failures are Statuses: never a crash, an exception or
// undefined behaviour. No GPU is needed.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/nn_attention.h"
#include "src/ir/reference_executor.h"
#include "src/passes/pipeline.h"
#include "tests/fuzz/graph_fuzz_ops.h"

namespace reprise::fuzz {
namespace {

// Graphs with more nodes than this are built and checked but not compiled (ResNet-152 would
// take seconds per input under the sanitizers).
constexpr int kMaxCompiledNodes = 400;
constexpr int kMaxMirroredNodes = 60;

std::string Name(FuzzedDataProvider& in) {
  static constexpr const char* kNames[] = {
      "",  "a",      "b",         "fc",         "conv",     "bn",   "loss",
      "x", "tokens", "fc.weight", "a.fc0.bias", "rng.step", "attn", "transformer.wte.weight"};
  return in.PickValueInArray(kNames);
}

void CheckGraph(const Graph& g) {
  for (const Node& n : g.nodes()) {
    for (const TensorSpec& s : n.outputs) Check(s.CheckedBytes().ok());
  }
}

// One builder call; on failure the graph must be as it was before it.
template <typename Result>
void Expect(const Graph& g, const std::string& before, const Result& result,
            std::vector<Value>& values) {
  if (!result.ok()) {
    Check(g.ToString() == before);
    return;
  }
  if constexpr (std::is_same_v<Result, absl::StatusOr<Value>>) {
    Check(result->valid() && result->node < g.num_nodes());  // A value of the graph.
    values.push_back(*result);
  } else if constexpr (std::is_same_v<Result, absl::StatusOr<std::vector<Value>>>) {
    values.insert(values.end(), result->begin(), result->end());
  }
}

int64_t Count(FuzzedDataProvider& in) {
  static constexpr int64_t kHuge[] = {0, -5, int64_t{1} << 62, std::numeric_limits<int64_t>::max()};
  return in.ConsumeIntegralInRange<int>(0, 7) ? in.ConsumeIntegralInRange<int64_t>(-1, 3)
                                              : in.PickValueInArray(kHuge);
}

models::Gpt2Config RandomGpt2Config(FuzzedDataProvider& in) {
  models::Gpt2Config c;
  c.batch = Extent(in);
  c.seq = Extent(in);
  c.max_positions = in.ConsumeBool() ? c.seq : Extent(in);
  c.vocab = Extent(in);
  c.layers = Count(in);
  c.heads = Extent(in);
  const bool divisible = c.heads > 0 && c.heads < (int64_t{1} << 32) && in.ConsumeBool();
  c.width = divisible ? c.heads * in.ConsumeIntegralInRange<int64_t>(1, 4) : Extent(in);
  c.init_std = in.ConsumeBool() ? 0.02 : RandomDouble(in);
  return c;
}

models::ResNetConfig RandomResNetConfig(FuzzedDataProvider& in) {
  static constexpr int kDepths[] = {18, 34, 50, 101, 152, 0, 7, -1};
  static constexpr int64_t kSizes[] = {32, 33, 31, 64, 224, 1};
  models::ResNetConfig c;
  c.depth = in.PickValueInArray(kDepths);
  c.batch = Extent(in);
  c.classes = Extent(in);
  c.image_size = in.ConsumeBool() ? in.PickValueInArray(kSizes) : Extent(in);
  c.layout = RandomLayout(in);
  c.dtype = RandomDType(in);
  return c;
}

models::MlpConfig RandomMlpConfig(FuzzedDataProvider& in) {
  return {.batch = Extent(in),
          .input_features = Extent(in),
          .depth = Count(in),
          .width = Extent(in),
          .classes = Extent(in)};
}

passes::CompileOptions RandomCompileOptions(FuzzedDataProvider& in) {
  static constexpr DType kCompute[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16,
                                       DType::kFloat64, DType::kInt32};
  static constexpr OptimizerKind kKinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdam,
                                             OptimizerKind::kAdamW};
  static constexpr LrDecay kDecays[] = {LrDecay::kConstant, LrDecay::kCosine, LrDecay::kStep};
  static constexpr LossScaling kScalings[] = {LossScaling::kAuto, LossScaling::kOff,
                                              LossScaling::kStatic, LossScaling::kDynamic};
  static constexpr NonFinitePolicy kPolicies[] = {NonFinitePolicy::kSkipStep,
                                                  NonFinitePolicy::kStop, NonFinitePolicy::kIgnore};
  static constexpr ChannelsLast kChannelsLast[] = {ChannelsLast::kAuto, ChannelsLast::kOn,
                                                   ChannelsLast::kOff};
  static constexpr MirrorOptions::Policy kMirror[] = {
      MirrorOptions::Policy::kOff, MirrorOptions::Policy::kAuto, MirrorOptions::Policy::kBudget};
  passes::CompileOptions o;
  if (in.ConsumeBool()) return o;  // The defaults, as a Trainer's.
  o.batch_ensembles = in.ConsumeBool();
  o.ensembles.min_models = in.ConsumeIntegralInRange<int>(-1, 4);
  o.channels_last = in.PickValueInArray(kChannelsLast);
  o.compute_dtype = in.ConsumeBool() ? DType::kFloat32 : in.PickValueInArray(kCompute);
  OptimizerOptions& opt = o.optimizer;
  opt.kind = in.PickValueInArray(kKinds);
  if (in.ConsumeBool()) {
    opt.learning_rate = static_cast<float>(RandomDouble(in));
    opt.momentum = static_cast<float>(RandomDouble(in));
    opt.nesterov = in.ConsumeBool();
    opt.beta1 = static_cast<float>(RandomDouble(in));
    opt.beta2 = static_cast<float>(RandomDouble(in));
    opt.epsilon = static_cast<float>(RandomDouble(in));
    opt.weight_decay = static_cast<float>(RandomDouble(in));
    opt.decay_rank1 = in.ConsumeBool();
    opt.max_grad_norm = static_cast<float>(RandomDouble(in));
  }
  if (in.ConsumeBool()) {
    opt.schedule.warmup_steps = Extent(in);
    opt.schedule.decay = in.PickValueInArray(kDecays);
    opt.schedule.total_steps = Extent(in);
    opt.schedule.min_lr_factor = static_cast<float>(RandomDouble(in));
    opt.schedule.step_size = Extent(in);
    opt.schedule.gamma = static_cast<float>(RandomDouble(in));
  }
  o.loss_scale.mode = in.PickValueInArray(kScalings);
  if (in.ConsumeBool()) {
    o.loss_scale.init_scale = static_cast<float>(RandomDouble(in));
    o.loss_scale.growth_factor = static_cast<float>(RandomDouble(in));
    o.loss_scale.backoff_factor = static_cast<float>(RandomDouble(in));
    o.loss_scale.growth_interval = Extent(in);
  }
  o.non_finite.policy = in.PickValueInArray(kPolicies);
  o.plan.mirror.policy = in.PickValueInArray(kMirror);
  o.plan.mirror.budget_bytes = Extent(in);
  o.plan.fuse = in.ConsumeBool();
  o.plan.fusion.whole_mlp_step = in.ConsumeBool();
  o.plan.fusion.gemm_epilogues = in.ConsumeBool();
  o.plan.lanes = in.ConsumeIntegralInRange<int>(-1, passes::kMaxLanes + 1);
  o.plan.fusion.update_writes_copies = in.ConsumeBool();
  o.plan.fusion.sgd_one_launch = in.ConsumeBool();
  o.plan.fusion.batch_norm_grad_sums = in.ConsumeBool();
  o.plan.fusion.sgd_checks_in_launch = in.ConsumeBool();
  return o;
}

// The CPU reference on a small graph: a Status either way.
void RunReference(FuzzedDataProvider& in, const Graph& g) {
  if (!IsSmall(g)) return;
  ir::ReferenceExecutor executor(g, /*float64=*/in.ConsumeBool(), in.ConsumeIntegral<uint64_t>());
  FillInputs(in, g, executor);
  (void)executor.Run();
}

// The whole pipeline for `loss` (any value: a non-scalar or integer one must be refused), then the
// reference on the training graph when it is small.
void Compile(FuzzedDataProvider& in, const Graph& g, Value loss) {
  if (g.num_nodes() > kMaxCompiledNodes) return;
  passes::CompileOptions options = RandomCompileOptions(in);
  // Mirroring plans every candidate it weighs: beyond this it takes seconds per input under the
  // sanitizers, and libFuzzer reports a timeout.
  if (g.num_nodes() > kMaxMirroredNodes) options.plan.mirror.policy = MirrorOptions::Policy::kOff;
  absl::StatusOr<passes::CompiledStep> step = passes::CompileStep(g, loss, options);
  if (!step.ok()) return;
  CheckGraph(step->plan.graph());
  CheckGraph(step->unfused_training);
  Check(step->plan.memory.arena_bytes >= 0);
  RunReference(in, step->unfused_training);
}

// A model built into a graph of its own: checked, run, compiled.
void Finish(FuzzedDataProvider& in, const Graph& g, Value loss) {
  CheckGraph(g);
  RunReference(in, g);
  Compile(in, g, loss);
}

void Run(FuzzedDataProvider& in) {
  Graph g;
  std::vector<Value> values;
  std::vector<Value> ints;  // Labels and token ids.
  const int steps = in.ConsumeIntegralInRange<int>(1, 24);
  for (int step = 0; step < steps && in.remaining_bytes() > 0; ++step) {
    const std::string before = g.ToString();
    auto pick = [&]() -> Value {
      switch (in.ConsumeIntegralInRange<int>(0, 31)) {
        case 0:
          return Value{};
        case 1:  // A node or an output that does not exist.
          return Value{in.ConsumeIntegralInRange<int32_t>(-2, g.num_nodes() + 2),
                       in.ConsumeIntegralInRange<int32_t>(-1, 3)};
        default:
          if (values.empty()) return Value{};
          return values[in.ConsumeIntegralInRange<size_t>(0, values.size() - 1)];
      }
    };
    auto pick_int = [&]() -> Value {
      return ints.empty() || in.ConsumeBool() ? pick() : ints.back();
    };
    const std::string name = Name(in);
    switch (in.ConsumeIntegralInRange<int>(0, 24)) {
      case 0: {
        const DType dtype = RandomDType(in);
        auto v = g.AddInput(name, {RandomShape(in), dtype}, RandomInitializer(in));
        Expect(g, before, v, values);
        if (v.ok() && dtype == DType::kInt32) ints.push_back(*v);
        break;
      }
      case 1: {
        const TensorSpec spec{RandomShape(in), RandomDType(in)};
        switch (in.ConsumeIntegralInRange<int>(0, 2)) {
          case 0:
            Expect(g, before, g.AddParameter(name, spec, RandomInitializer(in)), values);
            break;
          case 1:
            Expect(g, before, g.AddState(name, spec, RandomInitializer(in)), values);
            break;
          default:
            Expect(g, before, g.AddConstant(name, spec, RandomInitializer(in)), values);
            break;
        }
        break;
      }
      case 2:
        Expect(g, before, nn::Linear(g, pick(), Extent(in), name, in.ConsumeBool()), values);
        break;
      case 3:
        Expect(g, before, nn::Relu(g, pick(), name), values);
        break;
      case 4:
        Expect(g, before, nn::Add(g, pick(), pick(), name), values);
        break;
      case 5: {
        nn::Conv2dOptions o;
        o.kernel = Extent(in);
        o.stride = Extent(in);
        o.padding = in.ConsumeBool() ? Extent(in) : 0;
        o.dilation = in.ConsumeBool() ? Extent(in) : 1;
        o.groups = in.ConsumeBool() ? Extent(in) : 1;
        o.bias = in.ConsumeBool();
        o.layout = RandomLayout(in);
        o.weight_bound = in.ConsumeBool() ? 0 : RandomDouble(in);
        Expect(g, before, nn::Conv2d(g, pick(), Extent(in), name, o), values);
        break;
      }
      case 6: {
        nn::BatchNormOptions o;
        o.epsilon = RandomDouble(in);
        o.momentum = RandomDouble(in);
        o.layout = RandomLayout(in);
        o.training = in.ConsumeBool();
        Expect(g, before, nn::BatchNorm(g, pick(), name, o), values);
        break;
      }
      case 7:
        Expect(g, before,
               nn::MaxPool2d(g, pick(), Extent(in), Extent(in), in.ConsumeBool() ? 0 : Extent(in),
                             name, RandomLayout(in)),
               values);
        break;
      case 8:
        Expect(g, before, nn::GlobalAvgPool(g, pick(), name, RandomLayout(in)), values);
        break;
      case 9:
        Expect(g, before, nn::Flatten(g, pick(), name), values);
        break;
      case 10:
        Expect(g, before,
               nn::Dropout(g, pick(), RandomDouble(in), name, in.ConsumeIntegral<uint64_t>()),
               values);
        break;
      case 11:
        Expect(g, before,
               in.ConsumeBool() ? nn::SoftmaxCrossEntropy(g, pick(), pick_int(), name)
                                : nn::MaskedSoftmaxCrossEntropy(g, pick(), pick_int(), name),
               values);
        break;
      case 12: {
        auto mlp = models::AddMlp(g, RandomMlpConfig(in), name);
        if (!mlp.ok()) {
          Check(g.ToString() == before);
        } else {
          values.insert(values.end(), {mlp->loss, mlp->logits, mlp->features});
          ints.push_back(mlp->labels);
        }
        break;
      }
      case 13: {
        std::vector<Value> parts(in.ConsumeIntegralInRange<int>(0, 3));
        for (Value& p : parts) p = pick();
        Expect(g, before, models::SumLosses(g, parts, name), values);
        break;
      }
      case 14:
        Expect(g, before, nn::LayerNorm(g, pick(), name, RandomDouble(in)), values);
        break;
      case 15:
        Expect(g, before, nn::Gelu(g, pick(), name), values);
        break;
      case 16:
        Expect(g, before,
               nn::Embedding(g, pick_int(), Extent(in), Extent(in), name, RandomDouble(in)),
               values);
        break;
      case 17:
        Expect(g, before,
               nn::PositionEmbedding(g, pick(), Extent(in), Extent(in), name, RandomDouble(in)),
               values);
        break;
      case 18: {
        const int64_t heads = Extent(in);
        const int64_t seq = in.ConsumeBool() ? 0 : Extent(in);
        Expect(g, before,
               in.ConsumeBool() ? nn::CausalAttention(g, pick(), heads, name, seq)
                                : nn::CausalAttention(g, pick(), pick(), pick(), heads, name, seq),
               values);
        break;
      }
      case 19:
      case 20: {  // Any op of the engine's table, with any inputs and attributes.
        const ir::OpDef& op = RandomOp(in);
        std::vector<Value> inputs(in.ConsumeIntegralInRange<int>(0, 5));
        for (Value& v : inputs) v = pick();
        Expect(g, before, g.AddOp(op, name, inputs, RandomAttrs(in)), values);
        break;
      }
      case 21: {
        const models::MlpConfig config = RandomMlpConfig(in);
        auto losses = models::Ensemble(
            g, in.ConsumeIntegralInRange<int>(-1, 3),
            [&](Graph& graph, absl::string_view prefix, int) -> absl::StatusOr<Value> {
              auto mlp = models::AddMlp(graph, config, prefix);
              if (!mlp.ok()) return mlp.status();
              return mlp->loss;
            });
        Expect(g, before, losses, values);
        break;
      }
      case 22: {
        auto gpt = models::AddGpt2(g, RandomGpt2Config(in));
        if (!gpt.ok()) {
          Check(g.ToString() == before);
        } else {
          values.insert(values.end(), {gpt->loss, gpt->logits});
          ints.insert(ints.end(), {gpt->tokens, gpt->targets});
        }
        break;
      }
      case 23: {
        if (in.ConsumeBool()) {
          auto gpt = models::BuildGpt2(RandomGpt2Config(in));
          if (gpt.ok()) Finish(in, gpt->graph, gpt->loss);
        } else {
          auto resnet = models::BuildResNet(RandomResNetConfig(in));
          if (resnet.ok()) Finish(in, resnet->graph, resnet->loss);
        }
        break;
      }
      default: {
        const Graph::Mark mark = g.GetMark();
        (void)nn::Relu(g, pick(), "");
        (void)nn::Linear(g, pick(), Extent(in), name);
        g.RollBack(mark);
        Check(g.ToString() == before);
        break;
      }
    }
    CheckGraph(g);
  }
  RunReference(in, g);
  // The loss: a scalar float value if there is one (mostly the latest), or any value.
  Value loss;
  for (auto it = values.rbegin(); it != values.rend(); ++it) {
    const TensorSpec& s = g.spec(*it);
    if (s.shape.rank() == 0 && IsFloat(s.dtype)) {
      loss = *it;
      if (in.ConsumeIntegralInRange<int>(0, 3)) break;
    }
  }
  if (!values.empty() && in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    loss = values[in.ConsumeIntegralInRange<size_t>(0, values.size() - 1)];
  }
  Compile(in, g, loss);
}

}  // namespace
}  // namespace reprise::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  reprise::fuzz::Run(in);
  return 0;
}
