// Every parameter of a trainer by name, read back from the device: what the GPU tests compare bit
// for bit between steps, trainers and paths.
#ifndef REPRISE_TESTS_GPU_PARAMETER_VALUES_H_
#define REPRISE_TESTS_GPU_PARAMETER_VALUES_H_

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace reprise::testing {

using ParameterMap = std::map<std::string, std::vector<float>>;

// A Trainer's or a BucketedTrainer's, after the queued steps; a parameter that cannot be read
// fails the test and is left out.
template <typename AnyTrainer>
ParameterMap ParameterValues(AnyTrainer& t) {
  ParameterMap out;
  for (const std::string& name : t.ParameterNames()) {
    auto values = t.GetParameter(name);
    EXPECT_TRUE(values.ok()) << name << ": " << values.status();
    if (values.ok()) out[name] = *std::move(values);
  }
  return out;
}

inline bool AnyNan(const ParameterMap& parameters) {
  for (const auto& [name, values] : parameters) {
    for (float v : values) {
      if (std::isnan(v)) return true;
    }
  }
  return false;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_PARAMETER_VALUES_H_
