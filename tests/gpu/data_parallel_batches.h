// What the data-parallel GPU tests (tests/gpu/data_parallel_gpu_test.cc, and the one-process-per-
// GPU tests under mpirun, tests/mpi/) train on: a small MLP, batches whose labels follow from the
// features (so training makes progress; the trainer's and optimizer's GPU tests train on them too)
// and each rank's slice of a batch.
#ifndef REPRISE_TESTS_GPU_DATA_PARALLEL_BATCHES_H_
#define REPRISE_TESTS_GPU_DATA_PARALLEL_BATCHES_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reprise/reprise.h"

namespace reprise::testing {

inline constexpr int kDpFeatures = 16, kDpClasses = 5;

inline models::MlpConfig DpMlp(int64_t batch, int64_t width = 64) {
  return {.batch = batch,
          .input_features = kDpFeatures,
          .depth = 3,
          .width = width,
          .classes = kDpClasses};
}

struct DpBatch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

// `batch` rows of normal features, each labelled by a fixed linear score's best class.
inline DpBatch MakeDpBatch(std::mt19937& rng, int batch) {
  std::normal_distribution<float> normal;
  DpBatch b{std::vector<float>(batch * kDpFeatures), std::vector<int32_t>(batch)};
  for (float& v : b.x) v = normal(rng);
  for (int i = 0; i < batch; ++i) {
    float best = -1e9f;
    for (int c = 0; c < kDpClasses; ++c) {
      float score = 0;
      for (int j = 0; j < kDpFeatures; ++j) {
        score += b.x[i * kDpFeatures + j] * ((j * 7 + c * 3) % 5 - 2);
      }
      if (score > best) best = score, b.y[i] = c;
    }
  }
  return b;
}

// Rank `rank`'s slice of `whole` when `ranks` ranks split it.
inline DpBatch Shard(const DpBatch& whole, int rank, int ranks) {
  const size_t rows = whole.y.size() / ranks;
  DpBatch b;
  b.x.assign(whole.x.begin() + rank * rows * kDpFeatures,
             whole.x.begin() + (rank + 1) * rows * kDpFeatures);
  b.y.assign(whole.y.begin() + rank * rows, whole.y.begin() + (rank + 1) * rows);
  return b;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_DATA_PARALLEL_BATCHES_H_
