#include "src/ops/all_reduce.h"
#include "src/ops/attention.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/batched.h"
#include "src/ops/cast.h"
#include "src/ops/conv.h"
#include "src/ops/conv_bn.h"
#include "src/ops/decode_attention.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/masked_loss.h"
#include "src/ops/matmul_gelu.h"
#include "src/ops/mlp_step.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/pooling_bn_relu.h"
#include "src/ops/resize_rows.h"
#include "src/ops/transformer_ops.h"
#include "src/ops/transpose.h"

namespace reprise::ops {

std::vector<const ir::OpDef*> AllOps() {
  return {
      &MatmulOp(), &BiasAddOp(), &ReluOp(), &ReluGradOp(), &AddOp(), &ColumnSumOp(),
      &SoftmaxCrossEntropyOp(), &SoftmaxCrossEntropyGradOp(), &SgdMomentumOp(), &AdamOp(),
      &GradSumSquaresOp(), &GradSumSquaresNonfiniteOp(), &ClipCoefficientOp(), &GradNonfiniteOp(),
      &LossScaleCheckOp(), &LossScaleUpdateOp(), &LrScheduleOp(), &DropoutOp(), &DropoutGradOp(),
      &AdvanceStepOp(), &Conv2dOp(), &Conv2dDgradOp(), &Conv2dDgradAccumulateOp(),
      &Conv2dDgradAddOp(), &Conv2dWgradOp(), &ChannelBiasAddOp(), &ChannelSumOp(),
      &BatchNormTrainOp(), &BatchNormGradOp(), &BatchNormInferOp(), &MaxPool2dOp(),
      &MaxPool2dGradOp(), &GlobalAvgPoolOp(), &GlobalAvgPoolGradOp(), &FlattenOp(), &ReshapeOp(),
      &BatchNormActTrainOp(), &BatchNormActGradOp(), &BatchNormApplyOp(), &BatchNormApplyChainOp(),
      &MaxPool2dBnReluOp(), &MaxPool2dWithArgmaxOp(), &MaxPool2dGradFromArgmaxOp(), &TransposeOp(),
      &CastOp(), &CastMultiOp(), &RefreshCopiesOp(), &MatmulBiasOp(), &MatmulBiasReluMaskOp(),
      &MatmulDReluBiasGradOp(), &SoftmaxCrossEntropyWithGradOp(), &HeadLossChunksOp(),
      &SgdMomentumMultiOp(), &SgdMultiOp(), &AdamMultiOp(), &FusedPointwiseOp(), &MlpTrainStepOp(),
      // Batches padded to a shape bucket.
      &MaskedSoftmaxCrossEntropyOp(), &MaskedSoftmaxCrossEntropyGradOp(),
      // Ensemble batching (src/passes/batch_ensemble.h).
      &BatchedMatmulOp(), &BatchedMatmulBiasOp(), &BatchedBiasAddOp(), &BatchedColumnSumOp(),
      &BatchedReluGradBiasGradOp(), &BatchedSoftmaxCrossEntropyOp(),
      &BatchedSoftmaxCrossEntropyGradOp(), &BatchedSoftmaxCrossEntropyWithGradOp(), &ModelSumOp(),
      &ModelBroadcastOp(), &ModelTileOp(), &BatchedMlpTrainStepOp(),
      // Data parallelism (src/passes/gradient_buckets.h).
      &AllReduceOp(),
      // A convolution with the batch norm of its output (src/ops/conv_bn.h).
      &Conv2dBatchNormTrainOp(),
      // Transformers (src/ops/transformer_ops.h, src/ops/attention.h).
      &LayerNormOp(), &LayerNormGradOp(), &GeluOp(), &GeluGradOp(), &EmbeddingOp(),
      &EmbeddingGradOp(), &EmbeddingGradAddOp(), &EmbeddingGradAccumulateOp(), &AddPositionsOp(),
      &AddPositionsGradOp(), &CausalAttentionOp(), &CausalAttentionGradOp(), &MatmulBiasGeluAuxOp(),
      &MatmulDGeluOp(), &MatmulBiasGradOp(), &MatmulBiasResidualOp(), &LayerNormGradAddOp(),
      &LayerNormGradColumnSumOp(), &AddLayerNormOp(),
      // Decoding with a key/value cache (src/ops/decode_attention.h).
      &DecodeAttentionOp(), &AddPositionAtOp(), &AdvancePositionOp(),
      // A table padded with zero rows (GPT-2's vocabulary; src/ops/resize_rows.h).
      &ResizeRowsOp()};
}

}  // namespace reprise::ops
