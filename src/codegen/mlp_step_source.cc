// The source of the fused MLP step's cooperative kernels (kLayerPhases, kRowChain; see
// mlp_step_kernel.h) for a plan of PlanMlpStep: the device libraries with the plan's constants,
// then a kernel body that calls their phases in order with every tensor's address.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/mlp_cluster_kernel.h"
#include "src/codegen/mlp_guard_source.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/codegen/mlp_step_layout.h"

namespace reprise::codegen {
namespace {

#include "src/codegen/mlp_guard_device.inc"
#include "src/codegen/mlp_head_device.inc"
#include "src/codegen/mlp_primitives_device.inc"
#include "src/codegen/mlp_step_device.inc"

using namespace mlp_layout;  // NOLINT: the host mirrors of the device layout.

std::string B(bool v) { return v ? "true" : "false"; }

std::string GemmType(int kind, int64_t m, int64_t n, int64_t p, const MlpGemmTile& t, bool a_late,
                     bool b_late = false) {
  return absl::StrCat("Gemm<", kind, ", ", m, ", ", n, ", ", p, ", ", t.tm, ", ", t.tn, ", ", t.pc,
                      ", ", t.rm, ", ", t.rn, ", ", t.split, ", ", B(a_late), ", ", B(b_late), ", ",
                      B(t.mma), ">");
}

std::string Ptr(const std::string& name) { return name.empty() ? "nullptr" : name; }

// A tensor argument of the generated kernel: its name (empty: none) and its model stride.
struct Arg {
  std::string name;
  int64_t stride = 0;
};

// "T{p0, ..., pn, s0, ..., sn}" for GemmArgs and HeadArgs: the pointers, then their strides.
std::string ArgsOf(const char* type, const std::vector<Arg>& args,
                   const std::string& between = "") {
  std::vector<std::string> ptrs, strides;
  for (const Arg& a : args) {
    ptrs.push_back(Ptr(a.name));
    strides.push_back(absl::StrCat(a.stride));
  }
  return absl::StrCat(type, "{", absl::StrJoin(ptrs, ", "), ", ", between,
                      absl::StrJoin(strides, ", "), "}");
}

// A phase's arguments into the shared argument area (MlpStepPlan::arg_floats): thread 0 writes the
// GEMMs' (`ga[i]`, an array as GemmPhase takes it) and the head's (`*ha`, where `head` is not
// empty), and the block's barrier makes them every thread's. The phase's previous reader of the
// area is done: every phase ends in a block barrier (GridArrive, or Run's last).
// Without that area (an ensemble's plan: arg_floats 0) each thread builds them on its stack.
std::string SharedArgs(const MlpStepPlan& plan, const std::vector<std::string>& gemms,
                       const std::string& head = "") {
  if (plan.arg_floats == 0) {
    std::string code;
    if (!gemms.empty()) {
      absl::StrAppend(&code, "    const GemmArgs ga[] = {", absl::StrJoin(gemms, ", "), "};\n");
    }
    if (!head.empty()) {
      absl::StrAppend(&code, "    const HeadArgs head_args = ", head,
                      ";\n    const HeadArgs* const ha = &head_args;\n");
    }
    return code;
  }
  std::string code = "    GemmArgs* const ga = reinterpret_cast<GemmArgs*>(arg_area);\n";
  if (!head.empty()) {
    absl::StrAppend(&code, "    HeadArgs* const ha = reinterpret_cast<HeadArgs*>(ga + ",
                    gemms.size(), ");\n");
  }
  absl::StrAppend(&code, "    if (threadIdx.x == 0) {\n");
  for (size_t i = 0; i < gemms.size(); ++i) {
    absl::StrAppend(&code, "      ga[", i, "] = ", gemms[i], ";\n");
  }
  if (!head.empty()) absl::StrAppend(&code, "      *ha = ", head, ";\n");
  absl::StrAppend(&code, "    }\n    SyncThreads();\n");
  return code;
}

// The kernel for `plan`; `batched`: the ensemble form (BatchedMlpStepKernel's parameters).
GeneratedKernel StepKernel(const MlpStepPlan& plan, bool batched, bool shared_features,
                           bool shared_labels, bool phase_clock) {
  const int layers = plan.layers();
  const auto& d = plan.widths;
  const int64_t batch = plan.batch;
  const int64_t scratch = LossScratch(plan.models);
  const bool guarded = plan.target.guard != MlpGuard::kNone;
  const int64_t guard_scratch = guarded ? kGuardScratch : 0;
  std::string code = kMlpPrimitives;
  absl::StrAppend(
      &code, "\nnamespace mlp {\nconstexpr int kThreads = ", plan.target.threads,
      ";\nconstexpr bool kAligned = ", B(plan.target.aligned), ";\nconstexpr int kBatch = ", batch,
      ";\nconstexpr int kModels = ", plan.models, ";\nconstexpr int kSmemFloatsTotal = ",
      plan.shared_bytes / 4 - scratch - guard_scratch - plan.arg_floats,
      ";\nconstexpr bool kGuard = ", B(guarded),
      // Read by the guard's code only (NVRTC would warn of them in unguarded kernels).
      ";\n[[maybe_unused]] constexpr bool kGuardSticky = ", B(plan.target.guard == MlpGuard::kStop),
      ";\n[[maybe_unused]] constexpr int kGuardWord = ", kMlpStepGuardWord,
      // What a thread that finds a non-finite value stores in c.bad: its block's flag, or with a
      // deferred verdict the step's verdict word (kRan | kBad, mlp_guard_device.inc).
      ";\n[[maybe_unused]] constexpr int kBadFlag = ", plan.deferred_verdict ? 3 : 1,
      ";\nconstexpr bool kDoubleBuffer = ", B(plan.double_buffered), ";\n}  // namespace mlp\n",
      kMlpLibrary, kMlpHeadLibrary);
  if (guarded) absl::StrAppend(&code, kMlpGuardLibrary);

  const char* name = batched ? "reprise_batched_mlp_step" : "reprise_mlp_step";
  absl::StrAppend(
      &code, "\n",
      MlpStepKernelSignature(name, layers, plan.target.threads, batched, phase_clock, guarded,
                             plan.target.shadow),
      "  using namespace mlp;\n", "  Ctx c;\n", "  c.barrier = barrier;\n",
      "  c.smem = SharedBase();\n", "  c.row_loss = ws + ", plan.row_loss_offset,
      ";\n  c.loss = loss;\n  c.model_loss = ", batched ? "model_loss" : "nullptr",
      ";\n  c.lr = lr[0];\n  c.mu = momentum[0];\n",
      "  c.wd = weight_decay[0];\n  c.bad = nullptr;\n  c.stopped = 0;\n  unsigned arrival = 0;\n");
  if (plan.deferred_verdict) {
    absl::StrAppend(&code, "  const mlpg::Verdict verdict = mlpg::VerdictBegin<kGuardSticky>(",
                    "barrier + ", kMlpStepVerdictWord, ", record);\n",
                    "  c.bad = mlpg::VerdictWord(barrier + ", kMlpStepVerdictWord, ", verdict);\n",
                    "  c.stopped = verdict.stopped;\n");
  } else if (guarded) {
    absl::StrAppend(&code, "  c.bad = reinterpret_cast<int*>(c.smem + kSmemFloatsTotal + ",
                    "LossScratch(kModels));\n  const mlpg::Counters counters = ",
                    "mlpg::GuardBegin<kGuardSticky>(c.bad, barrier + kGuardWord, skipped_steps, ",
                    "record);\n  c.stopped = counters.stopped;\n");
  }
  if (plan.arg_floats > 0) {
    absl::StrAppend(&code, "  static_assert(sizeof(GemmArgs) <= ", 4 * mlp_layout::kArgFloatsEach,
                    " && sizeof(HeadArgs) <= ", 4 * mlp_layout::kArgFloatsEach,
                    ", \"arguments exceed their shared slots\");\n",
                    "  float* const arg_area = c.smem + kSmemFloatsTotal + LossScratch(kModels) + ",
                    guard_scratch, ";\n");
  }
  // Block b's %globaltimer at the start (index 0) and as it leaves phase i (index i + 1).
  auto stamp = [&](int index) {
    if (phase_clock) absl::StrAppend(&code, "  StampPhase(phase_clock, ", index, ");\n");
  };
  stamp(0);
  // Each tensor with its model stride: the elements of one model's slice (0 if shared).
  auto h = [&](int l) {
    return l == 0 ? Arg{"x", shared_features ? 0 : batch * d[0]}
                  : Arg{absl::StrCat("h", l), batch * d[l]};
  };
  auto dz = [&](int l) { return Arg{absl::StrCat("dz", l), batch * d[l + 1]}; };
  // Double-buffered, a weight or velocity is read from w<l>_now and its update written to
  // w<l>_next (see MlpGuard); else both are w<l>, updated in place.
  const char* now = plan.double_buffered ? "_now" : "";
  const char* next = plan.double_buffered ? "_next" : "";
  auto w = [&](int l, const char* which) {
    return Arg{absl::StrCat("w", l, which), int64_t{d[l + 1]} * d[l]};
  };
  auto vw = [&](int l, const char* which) {
    return Arg{absl::StrCat("vw", l, which), int64_t{d[l + 1]} * d[l]};
  };
  auto b = [&](int l, const char* which) { return Arg{absl::StrCat("b", l, which), d[l + 1]}; };
  auto vb = [&](int l, const char* which) { return Arg{absl::StrCat("vb", l, which), d[l + 1]}; };
  const Arg none;
  for (int l = 1; l < layers; ++l) {
    absl::StrAppend(&code, "  float* const h", l, " = ws + ", plan.h_offset[l], ";\n");
  }
  for (int l = 0; l < layers; ++l) {
    absl::StrAppend(&code, "  float* const dz", l, " = ws + ", plan.dz_offset[l], ";\n");
  }
  // Double-buffered, every block reads the parity word once, before it arrives on the guard word,
  // and only the last block to arrive flips it (GuardFinish): all see the same buffers. The
  // buffers are selected where each phase's arguments are built, so one body serves both parities
  // (emitting it once per parity, each with constant addresses, made the kernel 11% larger and,
  // measured on an H200, the 4-model ensemble's step 3% slower).
  if (plan.double_buffered) absl::StrAppend(&code, ParityPointersSource(plan));
  auto forward_args = [&](int l) {
    return ArgsOf("GemmArgs",
                  {h(l), w(l, now), h(l + 1), b(l, now), none, none, none, none, none, none});
  };
  auto dgrad_args = [&](int l) {
    return ArgsOf("GemmArgs",
                  {dz(l), w(l, now), dz(l - 1), none, h(l), none, none, none, none, none});
  };
  // Double-buffered, the unused bias and mask fields carry the step's weight and velocity
  // (mlp_step_device.inc's IssueExtras).
  auto wgrad_args = [&](int l) {
    return plan.double_buffered
               ? ArgsOf("GemmArgs", {dz(l), h(l), w(l, next), w(l, now), vw(l, now), vw(l, next),
                                     b(l, now), vb(l, now), b(l, next), vb(l, next)})
               : ArgsOf("GemmArgs", {dz(l), h(l), w(l, ""), none, none, vw(l, ""), b(l, ""),
                                     vb(l, ""), none, none});
  };
  // Guarded with copies (not double-buffered), the phase that first reads layer l's parameters
  // copies them out before the blocks arrive (GuardCopySource), then arrives where `arrive`.
  const bool copies = guarded && !plan.double_buffered;
  auto end_phase = [&](const std::vector<int>& layers_read, const std::string& tasks, bool arrive) {
    if (!copies) return std::string();
    return absl::StrCat(GuardCopySource(plan, layers_read, tasks),
                        arrive ? "    GridArrive(c.barrier, arrival);\n" : "");
  };
  // A layer's arguments for model k: one model's are the arguments themselves (see GemmTask).
  auto of_model = [&](const std::string& args) {
    return plan.models == 1 ? args : absl::StrCat(args, ".Model(k)");
  };
  // Guarded, the step ends here: each block's arrival on the guard word; the last block counts
  // the step and, with copies, restores every parameter where it skips (double-buffered: flips
  // the parity where it does not).
  auto guard_end = [&](int index) {
    if (!guarded) return;
    if (plan.deferred_verdict) {
      absl::StrAppend(
          &code, "  mlpg::VerdictEnd(barrier + ", kMlpStepVerdictWord,
          ", verdict, skipped_steps, record);  // Block 0 only: the next step decides.\n");
      stamp(index);
      return;
    }
    absl::StrAppend(&code, "  {  // The non-finite guard: the last block to finish decides.\n",
                    "    if (mlpg::GuardFinish(barrier + kGuardWord, c.bad, counters, "
                    "skipped_steps, record, ",
                    plan.double_buffered ? absl::StrCat("barrier + ", kMlpStepParityWord, ", flip")
                                         : std::string("nullptr, false"),
                    ")) {\n", GuardRestoreSource(plan), "    }\n  }\n");
    stamp(index);
  };
  const int last = layers - 1;
  const std::string head_type =
      absl::StrCat("Head<", batch, ", ", d[last], ", ", d[layers], ", ", plan.head_rows, ", ",
                   B(layers >= 2), ", ", B(layers >= 2), ">");
  const std::string head_args =
      ArgsOf("HeadArgs",
             {h(last), w(last, now), b(last, now), Arg{"labels", shared_labels ? 0 : batch},
              Arg{"logits", batch * d[layers]}, dz(last), layers >= 2 ? dz(last - 1) : none,
              Arg{absl::StrCat("ws + ", plan.row_loss_offset), batch}},
             absl::StrCat("dloss[0] / static_cast<float>(", batch, "), "));
  if (plan.row_chain) {
    const int64_t row_blocks = CeilDiv(batch, plan.head_rows);
    absl::StrAppend(&code,
                    "  {  // Phase 0: (model, row block) tasks: forward, loss, data gradients.\n");
    std::vector<std::string> inits, refs;
    for (int l = 0; l + 1 < layers; ++l) {
      absl::StrAppend(&code, "    typedef ",
                      GemmType(kFwd, batch, d[l + 1], d[l], plan.forward[l], true), " F", l, ";\n");
      refs.push_back(absl::StrCat("    const GemmArgs& f", l, " = ga[", inits.size(), "];\n"));
      inits.push_back(forward_args(l));
    }
    for (int l = 1; l + 1 < layers; ++l) {
      absl::StrAppend(&code, "    typedef ",
                      GemmType(kDgrad, batch, d[l], d[l + 1], plan.dgrad[l], true), " D", l, ";\n");
      refs.push_back(absl::StrCat("    const GemmArgs& g", l, " = ga[", inits.size(), "];\n"));
      inits.push_back(dgrad_args(l));
    }
    absl::StrAppend(&code, "    typedef ", head_type, " H;\n", SharedArgs(plan, inits, head_args),
                    absl::StrJoin(refs, ""), "    const HeadArgs& head = *ha;\n",
                    "    for (int task = blockIdx.x; task < kModels * ", row_blocks,
                    "; task += gridDim.x) {\n      const int k = task / ", row_blocks,
                    ", i = task - k * ", row_blocks, ";\n");
    for (int l = 0; l + 1 < layers; ++l) {
      absl::StrAppend(&code, "      RowBlock<F", l, ">(", of_model(absl::StrCat("f", l)),
                      ", i, c);\n");
    }
    absl::StrAppend(&code, "      H::Run(", of_model("head"), ", i, false, c);\n");
    for (int l = layers - 2; l >= 1; --l) {
      absl::StrAppend(&code, "      RowBlock<D", l, ">(", of_model(absl::StrCat("g", l)),
                      ", i, c);\n");
    }
    std::vector<int> every_layer;
    for (int l = 0; l < layers; ++l) every_layer.push_back(l);
    absl::StrAppend(&code, "    }\n",
                    copies ? end_phase(every_layer, absl::StrCat("kModels * ", row_blocks), true)
                           : "    GridArrive(c.barrier, arrival);\n",
                    "  }\n");
    stamp(1);
    // Every dz and h (but x) was written in phase 0: both operands are late; the weights,
    // velocities and biases are prefetched before the barrier.
    std::vector<std::string> types, args;
    for (int l = layers - 1; l >= 0; --l) {
      types.push_back(absl::StrCat("W", l));
      absl::StrAppend(&code, "  typedef ",
                      GemmType(kWgrad, d[l + 1], d[l], batch, plan.wgrad[l], true, l > 0), " W", l,
                      ";\n");
      args.push_back(wgrad_args(l));
    }
    absl::StrAppend(&code, "  {  // Phase 1: weight gradients and SGD of every layer.\n",
                    SharedArgs(plan, args), "    GemmPhase<true, false, true, ",
                    absl::StrJoin(types, ", "), ">(ga, c, arrival);\n  }\n");
    stamp(2);
    guard_end(3);
    return {name, absl::StrCat(code, "}\n")};
  }
  int phase = 0;
  const int last_phase = plan.phases - 1 - (guarded ? 1 : 0);  // Of the GEMMs.
  // kWait, kArrive; with copies, a forward phase arrives after them (end_phase).
  auto flags = [&](bool copying = false) {
    return absl::StrCat(B(phase > 0), ", ", B(phase < last_phase && !(copying && copies)));
  };
  for (int l = 0; l + 1 < layers; ++l, ++phase) {
    absl::StrAppend(&code, "  {  // Phase ", phase, ": forward of layer ", l, ".\n", "    typedef ",
                    GemmType(kFwd, batch, d[l + 1], d[l], plan.forward[l], l > 0), " G;\n",
                    SharedArgs(plan, {forward_args(l)}), "    GemmPhase<", flags(true),
                    ", false, G>(ga, c, arrival);\n",
                    end_phase({l}, "kModels * G::kTiles", phase < last_phase), "  }\n");
    stamp(phase + 1);
  }
  absl::StrAppend(&code, "  {  // Phase ", phase, ": the last layer, the loss and its gradient.\n",
                  "    typedef ", head_type, " H;\n", SharedArgs(plan, {}, head_args),
                  "    HeadPhase<H, ", flags(true), ">(*ha, c, arrival);\n",
                  end_phase({last}, "kModels * H::kTiles", phase < last_phase), "  }\n");
  stamp(phase + 1);
  ++phase;
  auto wgrad_type = [&](int l, bool a_late) {
    return GemmType(kWgrad, d[l + 1], d[l], batch, plan.wgrad[l], a_late);
  };
  for (int bs = 0; bs < std::max(1, layers - 1); ++bs, ++phase) {
    const int dl = layers - 2 - bs, wl = layers - 1 - bs;
    std::vector<std::string> types = {"G1"}, args;
    std::string g1, g2;
    if (layers == 1) {
      g1 = wgrad_type(0, WgradLate(0, layers));
      args = {wgrad_args(0)};
    } else if (dl >= 1) {
      g1 = GemmType(kDgrad, batch, d[dl], d[dl + 1], plan.dgrad[dl], true);
      g2 = wgrad_type(wl, WgradLate(wl, layers));
      args = {dgrad_args(dl), wgrad_args(wl)};
    } else {  // The last phase: wgrad of layers 1 and 0.
      g1 = wgrad_type(wl, WgradLate(wl, layers));
      g2 = wgrad_type(0, WgradLate(0, layers));
      args = {wgrad_args(wl), wgrad_args(0)};
    }
    absl::StrAppend(&code, "  {  // Phase ", phase, ": backward step ", bs, ".\n", "    typedef ",
                    g1, " G1;\n");
    if (!g2.empty()) {
      absl::StrAppend(&code, "    typedef ", g2, " G2;\n");
      types.push_back("G2");
    }
    absl::StrAppend(&code, SharedArgs(plan, args), "    GemmPhase<", flags(), ", ", B(bs == 0),
                    ", ", absl::StrJoin(types, ", "), ">(ga, c, arrival);\n  }\n");
    stamp(phase + 1);
  }
  guard_end(phase + 1);
  return {name, absl::StrCat(code, "}\n")};
}

}  // namespace

std::string MlpStepKernelSignature(const char* name, int layers, int threads, bool batched,
                                   bool phase_clock, bool guarded, bool shadow) {
  std::vector<std::string> params = {"const float* x",        "const int* labels",
                                     "const float* dloss",    "const float* lr",
                                     "const float* momentum", "const float* weight_decay"};
  for (int l = 0; l < layers; ++l) {
    for (const char* tensor : {"w", "b", "vw", "vb"}) {
      params.push_back(absl::StrCat("float* ", tensor, l));
    }
  }
  params.push_back("unsigned* barrier");
  if (guarded) {
    params.push_back("int* skipped_steps");
    params.push_back("int* record");
    if (shadow) params.push_back("float* shadow");
  }
  params.push_back("float* loss");
  if (batched) params.push_back("float* model_loss");
  params.push_back("float* logits");
  params.push_back("float* ws");
  if (phase_clock) params.push_back("unsigned long long* phase_clock");
  return absl::StrCat("extern \"C\" __global__ void __launch_bounds__(", threads, ", 1)\n", name,
                      "(", absl::StrJoin(params, ", "), ") {\n");
}

GeneratedKernel MlpStepKernel(const MlpStepPlan& plan) {
  if (plan.cluster > 0) return ClusterStepKernel(plan, /*batched=*/false, false, false, false);
  return StepKernel(plan, /*batched=*/false, false, false, /*phase_clock=*/false);
}

GeneratedKernel BatchedMlpStepKernel(const MlpStepPlan& plan, bool shared_features,
                                     bool shared_labels, bool phase_clock) {
  if (plan.cluster > 0) {
    return ClusterStepKernel(plan, /*batched=*/true, shared_features, shared_labels, phase_clock);
  }
  return StepKernel(plan, /*batched=*/true, shared_features, shared_labels, phase_clock);
}

GeneratedKernel MlpStepSettleKernel(const MlpStepPlan& plan) {
  const std::string name = "reprise_mlp_step_settle";
  std::vector<std::string> params = {"unsigned* barrier"};
  for (int l = 0; l < plan.layers(); ++l) {
    for (const char* tensor : {"w", "b", "vw", "vb"}) {
      params.push_back(absl::StrCat("float* ", tensor, l));
    }
  }
  for (const char* param :
       {"const float* shadow", "int* skipped_steps", "int* record", "int mode"}) {
    params.push_back(param);
  }
  std::string code = absl::StrCat("extern \"C\" __global__ void ", name, "(",
                                  absl::StrJoin(params, ", "), ") {\n");
  // A plan that is not double-buffered keeps every weight in its own buffer: nothing to do.
  if (!plan.double_buffered) return {name, absl::StrCat(code, "}\n")};
  if (plan.deferred_verdict) {
    // Mode 1 and 2 fold the last step's verdict into the counters and settle the words; mode 0
    // copies the values back where the step that would come next reads them from the shadow.
    code = absl::StrCat(kMlpPrimitives, kMlpGuardLibrary, code);
    absl::StrAppend(&code, "  unsigned* const words = barrier + ", kMlpStepVerdictWord, ";\n",
                    "  if (mode != 0) {\n    if (blockIdx.x == 0 && threadIdx.x == 0) {\n",
                    "      mlpg::VerdictFold(words, skipped_steps, record, mode == 2);\n    }\n",
                    "    return;\n  }\n",
                    "  if (!mlpg::VerdictBegin<false>(words, record).flip) return;  // In their "
                    "own buffers.\n");
  } else {
    absl::StrAppend(
        &code, "  if (barrier[", kMlpStepParityWord,
        "] == 0u || mode == 2) return;  // Already in their own buffers; no verdict to fold.\n",
        "  if (mode != 0) {\n", "    if (blockIdx.x == 0 && threadIdx.x == 0) barrier[",
        kMlpStepParityWord, "] = 0u;\n    return;\n  }\n");
  }
  absl::StrAppend(&code,
                  "  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + "
                  "threadIdx.x;\n",
                  "  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;\n");
  for (int l = 0; l < plan.layers(); ++l) {
    const int64_t weights = int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l];
    const int64_t biases = int64_t{plan.models} * plan.widths[l + 1];
    for (const auto& [param, offset, floats] :
         {std::tuple{"w", plan.shadow_w_offset[l], weights},
          std::tuple{"b", plan.shadow_b_offset[l], biases},
          std::tuple{"vw", plan.shadow_vw_offset[l], weights},
          std::tuple{"vb", plan.shadow_vb_offset[l], biases}}) {
      absl::StrAppend(&code, "  for (size_t i = first; i < ", floats, "; i += step) ", param, l,
                      "[i] = shadow[", offset, " + i];\n");
    }
  }
  return {name, absl::StrCat(code, "}\n")};
}

}  // namespace reprise::codegen
