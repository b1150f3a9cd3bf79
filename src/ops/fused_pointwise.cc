#include "src/ops/fused_pointwise.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "src/codegen/fused_kernels.h"
#include "src/ops/column_sum_launch.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<const ir::OpDef*> ChainableOp(absl::string_view name) {
  for (const ir::OpDef* op : AllOps()) {
    if (op->name == name && op->kind == ir::OpKind::kPointwise && !op->pointwise.expression.empty())
      return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a chainable pointwise op"));
}

absl::StatusOr<int> ParseInt(absl::string_view text) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value))
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an integer"));
  return value;
}

absl::StatusOr<std::string> StringAttr(const Attrs& attrs, absl::string_view key) {
  auto it = attrs.find(std::string(key));
  if (it == attrs.end() || !std::holds_alternative<std::string>(it->second))
    return absl::InvalidArgumentError(absl::StrCat("missing string attribute '", key, "'"));
  return std::get<std::string>(it->second);
}

// The specs of every step's value, checked against the chain's rules: one element shape for all
// steps, row-vector operands of one value per column.
absl::StatusOr<std::vector<TensorSpec>> StepSpecs(const PointwiseProgram& program,
                                                  absl::Span<const TensorSpec> in) {
  std::vector<TensorSpec> steps;
  for (size_t k = 0; k < program.steps.size(); ++k) {
    const PointwiseProgram::Step& step = program.steps[k];
    std::vector<TensorSpec> operands;
    for (int operand : step.operands) {
      if (operand >= static_cast<int>(in.size()) || -1 - operand >= static_cast<int>(k)) {
        return absl::InvalidArgumentError(
            absl::StrCat("step ", k, " (", step.op->name, ") reads operand ", operand,
                         " that is neither an input nor an earlier step"));
      }
      operands.push_back(operand >= 0 ? in[operand] : steps[-1 - operand]);
    }
    if (operands.size() != step.op->pointwise.operands.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", k, " (", step.op->name, ") has ", operands.size(), " operands"));
    }
    auto spec = step.op->infer({}, operands);
    if (!spec.ok()) {
      return absl::Status(spec.status().code(), absl::StrCat("step ", k, " (", step.op->name,
                                                             "): ", spec.status().message()));
    }
    if (!steps.empty() && !((*spec)[0] == steps[0])) {
      return absl::InvalidArgumentError(absl::StrCat("step ", k, " gives ", (*spec)[0].ToString(),
                                                     " but the chain computes ",
                                                     steps[0].ToString()));
    }
    steps.push_back((*spec)[0]);
  }
  return steps;
}

absl::StatusOr<std::vector<TensorSpec>> InferFused(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(PointwiseProgram program, PointwiseProgram::FromAttrs(attrs));
  if (program.steps.empty()) return absl::InvalidArgumentError("a fused chain needs a step");
  ASSIGN_OR_RETURN(std::vector<TensorSpec> steps, StepSpecs(program, in));
  std::vector<TensorSpec> out;
  for (int o : program.outputs) {
    if (o < 0 || o >= static_cast<int>(steps.size()))
      return absl::InvalidArgumentError(absl::StrCat("output step ", o, " does not exist"));
    out.push_back(steps[o]);
  }
  if (program.column_sum >= static_cast<int>(steps.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("column_sum step ", program.column_sum, " does not exist"));
  if (program.column_sum >= 0) {
    RETURN_IF_ERROR(CheckRank(steps[program.column_sum], 2, "the summed value"));
    out.push_back(TensorSpec{Shape{steps[0].shape.dim(1)}, steps[0].dtype});
  }
  if (out.empty()) return absl::InvalidArgumentError("a fused chain must output something");
  return out;
}

absl::Status CpuFused(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(PointwiseProgram program, PointwiseProgram::FromAttrs(node.attrs));
  std::vector<TensorSpec> in_specs;
  for (const ir::HostTensor* t : in) in_specs.push_back(t->spec());
  ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, StepSpecs(program, in_specs));
  std::vector<ir::HostTensor> steps;
  steps.reserve(program.steps.size());
  const Node stub;
  for (size_t k = 0; k < program.steps.size(); ++k) {
    std::vector<ir::HostTensor*> operands;
    for (int operand : program.steps[k].operands)
      operands.push_back(operand >= 0 ? in[operand] : &steps[-1 - operand]);
    steps.emplace_back(specs[k]);
    ir::HostTensor* result = &steps.back();
    RETURN_IF_ERROR(program.steps[k].op->cpu(stub, operands, absl::MakeSpan(&result, 1)));
  }
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    std::memcpy(out[o]->raw(), steps[program.outputs[o]].raw(), out[o]->spec().bytes());
  }
  if (program.column_sum >= 0) {
    ir::HostTensor* summed = &steps[program.column_sum];
    RETURN_IF_ERROR(
        ColumnSumOp().cpu(stub, absl::MakeSpan(&summed, 1), out.subspan(program.outputs.size())));
  }
  return absl::OkStatus();
}

// The kernel spec: each step's expression with $j replaced by its operand's variable. The fuse
// pass chains values of one spec only (each op's shape rule keeps its inputs' type), so one
// element type serves every input and output.
codegen::FusedPointwiseSpec KernelSpec(const PointwiseProgram& program, int num_inputs,
                                       DType dtype) {
  codegen::FusedPointwiseSpec spec;
  spec.dtype = dtype;
  spec.inputs.assign(num_inputs, codegen::Broadcast::kFull);
  for (const PointwiseProgram::Step& step : program.steps) {
    std::string expression(step.op->pointwise.expression);
    for (int j = static_cast<int>(step.operands.size()) - 1; j >= 0; --j) {
      const int operand = step.operands[j];
      if (operand >= 0 && step.op->pointwise.operands[j] == ir::Operand::kRowVector)
        spec.inputs[operand] = codegen::Broadcast::kRow;
      const std::string name =
          operand >= 0 ? absl::StrCat("in", operand) : absl::StrCat("s", -1 - operand);
      expression = absl::StrReplaceAll(expression, {{absl::StrCat("$", j), name}});
    }
    spec.expressions.push_back(expression);
  }
  spec.outputs = program.outputs;
  spec.column_sum = program.column_sum;
  return spec;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerFused(const LoweringContext& ctx,
                                                      const Node& node) {
  // First, so that tensors of a type without kernels, or of mixed types, are refused by name.
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(PointwiseProgram program, PointwiseProgram::FromAttrs(node.attrs));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> steps, StepSpecs(program, ctx.input_specs));
  const TensorSpec& element = steps[0];  // Every step has this shape.
  const int64_t n = element.NumElements();
  const int64_t cols = element.shape.rank() == 0 ? 1 : element.shape.dim(element.shape.rank() - 1);
  const codegen::GeneratedKernel kernel =
      codegen::FusedPointwise(KernelSpec(program, static_cast<int>(ctx.inputs.size()), dtype));
  if (program.column_sum < 0) {
    KernelArgs args;
    for (void* p : ctx.inputs) args.Add(p);
    for (void* p : ctx.outputs) args.Add(p);
    args.Add(static_cast<long long>(n)).Add(static_cast<long long>(cols));
    return NvrtcKernel::Create(ctx, node.name, kernel, GridFor(n, 256, *ctx.device), dim3(256), 0,
                               std::move(args));
  }
  // The column sums are the last output: LowerColumnSums adds their address after the others.
  KernelArgs summed;
  std::vector<void*> arrays(ctx.inputs.begin(), ctx.inputs.end());
  arrays.insert(arrays.end(), ctx.outputs.begin(), ctx.outputs.end() - 1);
  for (void* p : arrays) summed.Add(p);
  ASSIGN_OR_RETURN(ColumnSumLaunches launches,
                   LowerColumnSums(ctx, node.name, kernel, dtype, std::move(summed), arrays,
                                   ctx.outputs.back(), cols == 0 ? 0 : n / cols, cols));
  return AsKernel(std::move(launches));
}

}  // namespace

absl::StatusOr<runtime::KernelSource> FusedPointwiseKernel(const Node& node) {
  ASSIGN_OR_RETURN(PointwiseProgram program, PointwiseProgram::FromAttrs(node.attrs));
  // The outputs have the chain's type (the inputs are checked again at lowering).
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, {}));
  return ToKernelSource(
      codegen::FusedPointwise(KernelSpec(program, static_cast<int>(node.inputs.size()), dtype)));
}

Attrs PointwiseProgram::ToAttrs() const {
  std::vector<std::string> steps_text;
  for (const Step& step : steps) {
    std::vector<std::string> operands_text;
    for (int operand : step.operands)
      operands_text.push_back(operand >= 0 ? absl::StrCat(operand)
                                           : absl::StrCat("s", -1 - operand));
    steps_text.push_back(absl::StrCat(step.op->name, ":", absl::StrJoin(operands_text, ",")));
  }
  return Attrs{{"steps", absl::StrJoin(steps_text, ";")},
               {"outputs", absl::StrJoin(outputs, ",")},
               {"column_sum", static_cast<int64_t>(column_sum)}};
}

absl::StatusOr<PointwiseProgram> PointwiseProgram::FromAttrs(const Attrs& attrs) {
  PointwiseProgram program;
  ASSIGN_OR_RETURN(std::string steps_text, StringAttr(attrs, "steps"));
  for (absl::string_view step_text : absl::StrSplit(steps_text, ';', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(step_text, ':');
    if (parts.size() != 2)
      return absl::InvalidArgumentError(absl::StrCat("bad step '", step_text, "'"));
    Step step;
    ASSIGN_OR_RETURN(step.op, ChainableOp(parts[0]));
    for (absl::string_view operand : absl::StrSplit(parts[1], ',', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&operand, "s")) {
        ASSIGN_OR_RETURN(int k, ParseInt(operand));
        step.operands.push_back(StepOperand(k));
      } else {
        ASSIGN_OR_RETURN(int i, ParseInt(operand));
        step.operands.push_back(i);
      }
    }
    program.steps.push_back(std::move(step));
  }
  ASSIGN_OR_RETURN(std::string outputs_text, StringAttr(attrs, "outputs"));
  for (absl::string_view o : absl::StrSplit(outputs_text, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(int k, ParseInt(o));
    program.outputs.push_back(k);
  }
  ASSIGN_OR_RETURN(int64_t column_sum, ir::IntAttr(attrs, "column_sum"));
  program.column_sum = static_cast<int>(column_sum);
  return program;
}

const ir::OpDef& FusedPointwiseOp() {
  static const ir::OpDef op{.name = "fused_pointwise",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferFused,
                            .cpu = CpuFused,
                            .lower = LowerFused,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
