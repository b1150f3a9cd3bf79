// The `_reprise` extension module, which python/reprise/__init__.py re-exports as `reprise`.
#include <nanobind/nanobind.h>

#include "python/src/bindings.h"
#include "python/src/errors.h"

NB_MODULE(_reprise, m) {
  m.doc() = "reprise: static-shape training captured into CUDA graphs";
  reprise::python::BindErrors(m);
  reprise::python::BindGraphs(m);
  reprise::python::BindOptions(m);
  reprise::python::BindTrainer(m);
  reprise::python::BindData(m);
}
