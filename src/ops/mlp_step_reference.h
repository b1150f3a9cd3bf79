// The CPU reference of one MLP's whole SGD-with-momentum step, shared by mlp_train_step and
// batched_mlp_train_step (one call per model): the unfused training graph's arithmetic in the same
// order and precision, so that the fused and unfused references agree bit for bit.
#ifndef REPRISE_SRC_OPS_MLP_STEP_REFERENCE_H_
#define REPRISE_SRC_OPS_MLP_STEP_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace reprise::ops {

// One model's tensors: features [B, d_0], labels [B], per layer l W_l [d_{l+1}, d_l], b_l
// [d_{l+1}] and their velocities (updated in place), logits [B, d_L] (written).
template <typename T>
struct MlpStepTensors {
  const T* x = nullptr;
  const int32_t* labels = nullptr;
  std::vector<T*> w, b, vw, vb;
  T* logits = nullptr;
};

struct MlpStepScalars {
  double dloss = 1, lr = 0, mu = 0, wd = 0;
};

// One model's weight and bias gradients, per layer.
template <typename T>
struct MlpStepGradients {
  std::vector<std::vector<T>> dw, db;

  // Whether every one is finite (the non-finite guard's check, with the loss).
  bool Finite() const {
    for (const auto* grads : {&dw, &db}) {
      for (const std::vector<T>& g : *grads) {
        for (T v : g) {
          if (!std::isfinite(v)) return false;
        }
      }
    }
    return true;
  }
};

// The forward pass, the loss and the backward pass, no update: the mean loss in *loss, the
// logits, and the gradients in *grads. Matmuls accumulate in double and round once; bias add,
// ReLU, the loss and column sums run in T. `who` prefixes the message of a bad label
// ("model 3 ").
template <typename T>
absl::Status MlpStepGradientsOnCpu(int64_t batch, const std::vector<int64_t>& d,
                                   const MlpStepScalars& s, const MlpStepTensors<T>& m, T* loss,
                                   MlpStepGradients<T>* grads, const std::string& who = "") {
  const int layers = static_cast<int>(d.size()) - 1;
  const int64_t classes = d[layers];
  for (int64_t r = 0; r < batch; ++r) {
    if (m.labels[r] < 0 || m.labels[r] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat("label ", m.labels[r], " of ", who, "row ", r,
                                                     " is outside [0, ", classes, ")"));
    }
  }
  // h[l] is layer l's input [batch, d[l]]; h[layers] holds the logits.
  std::vector<std::vector<T>> h(layers + 1);
  h[0].assign(m.x, m.x + batch * d[0]);
  for (int l = 0; l < layers; ++l) {
    const T* w = m.w[l];
    const T* b = m.b[l];
    h[l + 1].resize(batch * d[l + 1]);
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < d[l + 1]; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < d[l]; ++p) {
          sum += static_cast<double>(h[l][i * d[l] + p]) * static_cast<double>(w[j * d[l] + p]);
        }
        T y = static_cast<T>(sum);
        y = y + b[j];
        if (l + 1 < layers) y = y > T(0) || y != y ? y : T(0);  // As the relu op does.
        h[l + 1][i * d[l + 1] + j] = y;
      }
    }
  }
  const std::vector<T>& z = h[layers];
  std::copy(z.begin(), z.end(), m.logits);
  // dz[l]: the gradient at layer l's output before its activation, [batch, d[l + 1]].
  std::vector<std::vector<T>> dz(layers);
  dz[layers - 1].resize(batch * classes);
  const T scale = static_cast<T>(s.dloss) / static_cast<T>(batch);
  T total = 0;
  for (int64_t r = 0; r < batch; ++r) {
    const T* zr = z.data() + r * classes;
    T mx = zr[0];
    for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, zr[c]);
    T sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(zr[c] - mx);
    total += std::log(sum) + mx - zr[m.labels[r]];
    for (int64_t c = 0; c < classes; ++c) {
      dz[layers - 1][r * classes + c] =
          scale * (std::exp(zr[c] - mx) / sum - (c == m.labels[r] ? T(1) : T(0)));
    }
  }
  *loss = total / static_cast<T>(batch);
  std::vector<std::vector<T>>& dw = grads->dw;
  std::vector<std::vector<T>>& db = grads->db;
  dw.assign(layers, {});
  db.assign(layers, {});
  for (int l = layers - 1; l >= 0; --l) {
    const int64_t n_out = d[l + 1], n_in = d[l];
    // Row by row so the inner loop is contiguous; each element still sums over i in order.
    dw[l].resize(n_out * n_in);
    std::vector<double> acc(n_in);
    for (int64_t j = 0; j < n_out; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t i = 0; i < batch; ++i) {
        const double a = static_cast<double>(dz[l][i * n_out + j]);
        const T* hr = h[l].data() + i * n_in;
        for (int64_t p = 0; p < n_in; ++p) acc[p] += a * static_cast<double>(hr[p]);
      }
      for (int64_t p = 0; p < n_in; ++p) dw[l][j * n_in + p] = static_cast<T>(acc[p]);
    }
    db[l].resize(n_out);
    for (int64_t j = 0; j < n_out; ++j) {
      T sum = 0;
      for (int64_t i = 0; i < batch; ++i) sum += dz[l][i * n_out + j];
      db[l][j] = sum;
    }
    if (l == 0) break;
    const T* w = m.w[l];
    dz[l - 1].resize(batch * n_in);
    for (int64_t i = 0; i < batch; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < n_out; ++j) {
        const double a = static_cast<double>(dz[l][i * n_out + j]);
        const T* wr = w + j * n_in;
        for (int64_t p = 0; p < n_in; ++p) acc[p] += a * static_cast<double>(wr[p]);
      }
      for (int64_t p = 0; p < n_in; ++p) {
        dz[l - 1][i * n_in + p] = h[l][i * n_in + p] > T(0) ? static_cast<T>(acc[p]) : T(0);
      }
    }
  }
  return absl::OkStatus();
}

// SGD with momentum of every parameter from `grads`, in T, as CpuSgd rounds it.
template <typename T>
void ApplyMlpStepOnCpu(const MlpStepScalars& s, const MlpStepTensors<T>& m,
                       const MlpStepGradients<T>& grads) {
  const int layers = static_cast<int>(grads.dw.size());
  const T lr = static_cast<T>(s.lr), mu = static_cast<T>(s.mu), wd = static_cast<T>(s.wd);
  auto sgd = [&](T* w, const std::vector<T>& g, T* v) {
    for (size_t i = 0; i < g.size(); ++i) {  // As CpuSgd: separate roundings.
      const T grad = g[i] + wd * w[i];
      const T vel = mu * v[i] + grad;
      v[i] = vel;
      w[i] = w[i] - lr * vel;
    }
  };
  for (int l = 0; l < layers; ++l) {
    sgd(m.w[l], grads.dw[l], m.vw[l]);
    sgd(m.b[l], grads.db[l], m.vb[l]);
  }
}

// The whole step: gradients, then the update.
template <typename T>
absl::Status MlpStepOnCpu(int64_t batch, const std::vector<int64_t>& d, const MlpStepScalars& s,
                          const MlpStepTensors<T>& m, T* loss, const std::string& who = "") {
  MlpStepGradients<T> grads;
  if (absl::Status st = MlpStepGradientsOnCpu(batch, d, s, m, loss, &grads, who); !st.ok())
    return st;
  ApplyMlpStepOnCpu(s, m, grads);
  return absl::OkStatus();
}

// The guard's counters after a step (as loss_scale_check with attr count moves them): skipped_steps
// counts skipped steps, record = [steps checked, 1 + the first skipped step or 0].
inline void CountMlpStepGuard(int32_t* skipped_steps, int32_t* record, bool skip) {
  const int32_t steps = record[0];
  if (skip) {
    ++*skipped_steps;
    if (record[1] == 0) record[1] = steps + 1;
  }
  record[0] = steps + 1;
}

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MLP_STEP_REFERENCE_H_
