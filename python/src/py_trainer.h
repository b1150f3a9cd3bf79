// PyTrainer: the Python module's Trainer object (trainer.cc binds it, forward.cc adds the forward
// runners compiled on it).
#ifndef REPRISE_PYTHON_SRC_PY_TRAINER_H_
#define REPRISE_PYTHON_SRC_PY_TRAINER_H_

#include <nanobind/nanobind.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "reprise/tensor.h"
#include "reprise/trainer.h"

namespace reprise::python {

// The C++ Trainer and what Python needs beside it: the graph's tensor specs (for shapes and
// dtypes), and the Python objects whose memory inputs are bound to, kept alive while bound.
struct PyTrainer {
  std::unique_ptr<Trainer> trainer;
  int device = 0;
  std::map<std::string, TensorSpec> inputs;   // Input nodes of the user's graph.
  std::map<std::string, TensorSpec> tensors;  // Its parameters and state, for get_parameter.
  std::map<std::string, nanobind::object> bound;

  absl::Status Unbind(const std::string& name) {
    if (bound.erase(name) == 0) return absl::OkStatus();
    return trainer->BindInput(name, nullptr, 0);
  }
};

// forward.cc: Trainer.compile_forward, ForwardRunner, and GPT-2's decoder and generator (in
// m.models).
void BindForward(nanobind::module_& m, nanobind::class_<PyTrainer>& trainer);

}  // namespace reprise::python

#endif  // REPRISE_PYTHON_SRC_PY_TRAINER_H_
