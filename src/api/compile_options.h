// TrainOptions -> what the step compiler (src/passes/pipeline.h) and the lowering
// (src/ops/gpu_kernel.h) take. The Trainer and reprise-dump both convert here, so a dump with the
// same options prints the plan a Trainer runs.
#ifndef REPRISE_SRC_API_COMPILE_OPTIONS_H_
#define REPRISE_SRC_API_COMPILE_OPTIONS_H_

#include "reprise/trainer.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/passes/pipeline.h"

namespace reprise {

// `mlp_step_target`: the device the whole-step MLP kernel is planned for
// (ops::MlpTrainStepTargetFor of the trainer's device).
passes::CompileOptions CompileOptionsFor(const TrainOptions& options,
                                         const codegen::MlpStepTarget& mlp_step_target);

ops::LoweringOptions LoweringOptionsFor(const TrainOptions& options);

}  // namespace reprise

#endif  // REPRISE_SRC_API_COMPILE_OPTIONS_H_
