#include "src/ops/fused_pointwise.h"
#include "src/ops/mlp_step.h"
#include "src/ops/ops.h"

namespace reprise::ops {

std::vector<const ir::OpDef*> AllOps() {
  return {&MatmulOp(),
          &BiasAddOp(),
          &ReluOp(),
          &ReluGradOp(),
          &AddOp(),
          &ColumnSumOp(),
          &SoftmaxCrossEntropyOp(),
          &SoftmaxCrossEntropyGradOp(),
          &SgdMomentumOp(),
          &DropoutOp(),
          &DropoutGradOp(),
          &AdvanceStepOp(),
          &MatmulBiasOp(),
          &SoftmaxCrossEntropyWithGradOp(),
          &SgdMomentumMultiOp(),
          &FusedPointwiseOp(),
          &MlpTrainStepOp()};
}

}  // namespace reprise::ops
