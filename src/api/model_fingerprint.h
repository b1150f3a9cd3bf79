// The fingerprint of a model: what a checkpoint records so that the state of one model is never
// restored into another. It covers what decides which state tensors exist and what they mean: the
// user's graph (every node's name, op, attributes, inputs, control edges and output specs), the
// loss, and the optimizer's kind (SGD, SGD with Nesterov, Adam or AdamW keep different or
// differently used state). It leaves out what only decides how the same step runs (ExecMode, lanes,
// fusion, mirroring, channels-last, TF32, determinism, compute dtype), initial values (restoring
// overwrites them) and the hyperparameters that are bound inputs or schedule settings, so a run may
// be resumed with a new learning rate or a longer schedule.
#ifndef REPRISE_SRC_API_MODEL_FINGERPRINT_H_
#define REPRISE_SRC_API_MODEL_FINGERPRINT_H_

#include <string>

#include "reprise/graph.h"
#include "reprise/optimizer.h"

namespace reprise {

// 64 hexadecimal digits (SHA-256 of a canonical description). Host-only.
std::string ModelFingerprint(const Graph& graph, Value loss, const OptimizerOptions& optimizer);

}  // namespace reprise

#endif  // REPRISE_SRC_API_MODEL_FINGERPRINT_H_
