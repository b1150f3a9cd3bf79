// A learnable image task for the small-ResNet GPU tests: each class is a fixed random image
// template under Gaussian noise. The same seed gives the same batches in every test that uses it.
#ifndef REPRISE_TESTS_GPU_TEMPLATE_IMAGES_H_
#define REPRISE_TESTS_GPU_TEMPLATE_IMAGES_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reprise/trainer.h"

namespace reprise::testing {

class TemplateImages {
 public:
  // Batches of `batch` images of 3 x size x size (either layout reads them as its own: the
  // templates are noise, so the layout only permutes them) labelled in [0, classes).
  TemplateImages(int batch, int size, int classes) : batch_(batch), pixels_(3 * size * size) {
    std::uniform_real_distribution<float> uniform(-1, 1);
    templates_.resize(classes);
    for (auto& t : templates_) {
      t.resize(pixels_);
      for (float& v : t) v = uniform(rng_);
    }
  }
  void Next(std::vector<float>& x, std::vector<int32_t>& y) {
    std::normal_distribution<float> normal;
    x.resize(static_cast<size_t>(batch_) * pixels_);
    y.resize(batch_);
    for (int i = 0; i < batch_; ++i) {
      y[i] = static_cast<int32_t>(rng_() % templates_.size());
      for (int j = 0; j < pixels_; ++j)
        x[static_cast<size_t>(i) * pixels_ + j] = templates_[y[i]][j] + 0.5f * normal(rng_);
    }
  }

 private:
  std::mt19937 rng_{5};
  int batch_, pixels_;
  std::vector<std::vector<float>> templates_;
};

// `steps` steps on a fresh stream of TemplateImages(batch, size, classes) fed as "images" and
// "labels": each step's loss.
inline std::vector<float> TrainOnTemplateImages(Trainer& t, int steps, int batch, int size,
                                                int classes) {
  TemplateImages data(batch, size, classes);
  std::vector<float> x, losses;
  std::vector<int32_t> y;
  for (int s = 0; s < steps; ++s) {
    data.Next(x, y);
    EXPECT_TRUE(t.SetInput("images", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    const absl::StatusOr<float> loss = t.Loss();
    EXPECT_TRUE(loss.ok()) << loss.status();
    losses.push_back(loss.ok() ? *loss : 0.0f);
  }
  return losses;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_TEMPLATE_IMAGES_H_
