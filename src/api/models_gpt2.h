// The GPT-2 builder behind models::BuildGpt2, with the one choice the public API does not offer.
#ifndef REPRISE_SRC_API_MODELS_GPT2_H_
#define REPRISE_SRC_API_MODELS_GPT2_H_

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/models.h"

namespace reprise::models {

// models::AddGpt2 with tie_output = true. false gives the output projection a parameter of its
// own, "lm_head.weight" [vocab, C] (initialised as the embedding), read where the tied model reads
// transformer.wte.weight: the tests compare the tied gradient with the sum of these two.
absl::StatusOr<Gpt2Values> AddGpt2Model(Graph& graph, const Gpt2Config& config, bool tie_output);

}  // namespace reprise::models

#endif  // REPRISE_SRC_API_MODELS_GPT2_H_
