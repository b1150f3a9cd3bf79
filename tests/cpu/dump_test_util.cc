#include "tests/cpu/dump_test_util.h"

#include <utility>

#include "src/autodiff/optimizer_graph.h"

namespace reprise::testing {

MlpStages SmallMlpStages(bool fuse, int lanes) {
  MlpStages s;
  s.mlp = models::BuildMlp(kSmallMlp).value();
  // As the Trainer and reprise-dump build it: with the non-finite guard (on by default).
  s.training = autodiff::BuildTrainingGraphWith(s.mlp.graph, s.mlp.loss, autodiff::FromSgd({}), {},
                                                autodiff::NonFiniteOptions{})
                   .value();
  passes::PlanOptions options{.fuse = fuse, .lanes = lanes};
  options.fusion.whole_mlp_step = false;
  s.plan = passes::BuildPlan(s.training, {}, options).value();
  return s;
}

}  // namespace reprise::testing
