// The GPT-2 builder behind models::BuildGpt2, with the one choice the public API does not offer,
// and the pieces the decoder (models_gpt2_decode.cc) builds with.
#ifndef REPRISE_SRC_API_MODELS_GPT2_H_
#define REPRISE_SRC_API_MODELS_GPT2_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/optimizer.h"

namespace reprise::models {

// models::AddGpt2 with tie_output = true. false gives the output projection a parameter of its
// own, "lm_head.weight" [vocab, C] (initialised as the embedding), read where the tied model reads
// transformer.wte.weight: the tests compare the tied gradient with the sum of these two.
absl::StatusOr<Gpt2Values> AddGpt2Model(Graph& graph, const Gpt2Config& config, bool tie_output);

// What BuildGpt2 and BuildGpt2Decoder share.
// InvalidArgument, naming the field, for a config BuildGpt2 cannot build.
absl::Status CheckGpt2Config(const Gpt2Config& config);
// Uniform with standard deviation `std`: GPT-2's initialisation (the engine has no normal one).
Initializer Gpt2Uniform(double std);
// x [rows, in] · Wᵀ + b with W "<name>.weight" [out, in] (Gpt2Uniform(weight_std)) and b
// "<name>.bias" (zeros), as nn::Linear's nodes, so that the fuse pass folds them alike.
absl::StatusOr<Value> Gpt2Linear(Graph& g, Value x, int64_t in, int64_t out,
                                 const std::string& name, double weight_std);

// AdamW as GPT-2 trains here, in llm.c and in nanoGPT: betas 0.9 and 0.95, weight decay 0.1 on the
// 2-D weights only, gradients clipped to norm 1.0, at a constant `learning_rate` (the caller adds
// a warm-up and a decay to its schedule).
OptimizerOptions Gpt2AdamW(float learning_rate = 6e-4f);

}  // namespace reprise::models

#endif  // REPRISE_SRC_API_MODELS_GPT2_H_
