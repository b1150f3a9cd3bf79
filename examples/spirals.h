// A synthetic classification task with real structure: K interleaved spiral arms in the plane.
// No straight line separates them, so only a network with hidden layers can learn it.
#ifndef REPRISE_EXAMPLES_SPIRALS_H_
#define REPRISE_EXAMPLES_SPIRALS_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace reprise::examples {

class Spirals {
 public:
  Spirals(int classes, uint64_t seed) : classes_(classes), rng_(seed) {}

  // Fills a batch: features [batch, 2], labels [batch]. Every call draws fresh points.
  void Next(int batch, std::vector<float>& features, std::vector<int32_t>& labels) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::normal_distribution<float> noise(0.0f, 0.04f);
    std::uniform_int_distribution<int> label(0, classes_ - 1);
    features.resize(2 * batch);
    labels.resize(batch);
    for (int i = 0; i < batch; ++i) {
      const int k = label(rng_);
      const float t = unit(rng_);
      const float angle = 3.5f * t + 2.0f * 3.14159265f * k / classes_;
      features[2 * i] = t * std::cos(angle) + noise(rng_);
      features[2 * i + 1] = t * std::sin(angle) + noise(rng_);
      labels[i] = k;
    }
  }

 private:
  int classes_;
  std::mt19937_64 rng_;
};

}  // namespace reprise::examples

#endif  // REPRISE_EXAMPLES_SPIRALS_H_
