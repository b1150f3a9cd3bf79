// The parts of the `reprise` Python module, one per concern.
#ifndef REPRISE_PYTHON_SRC_BINDINGS_H_
#define REPRISE_PYTHON_SRC_BINDINGS_H_

#include <nanobind/nanobind.h>

namespace reprise::python {

void BindGraphs(nanobind::module_& m);   // graph.cc: Graph, DType, Layout, nn, models.
void BindOptions(nanobind::module_& m);  // options.cc: TrainOptions and what it holds.
void BindTrainer(nanobind::module_& m);  // trainer.cc: Trainer, VerifyResult, TrainerReport.
void BindData(nanobind::module_& m);     // data.cc: token shards and their loaders.

}  // namespace reprise::python

#endif  // REPRISE_PYTHON_SRC_BINDINGS_H_
