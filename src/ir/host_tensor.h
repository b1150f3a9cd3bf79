// A tensor in host memory: what the CPU reference implementations read and write.
#ifndef REPRISE_SRC_IR_HOST_TENSOR_H_
#define REPRISE_SRC_IR_HOST_TENSOR_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "reprise/tensor.h"

namespace reprise::ir {

class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(TensorSpec spec)
      : spec_(std::move(spec)), storage_((spec_.bytes() + 7) / 8, 0) {}

  const TensorSpec& spec() const { return spec_; }
  DType dtype() const { return spec_.dtype; }
  int64_t size() const { return spec_.NumElements(); }

  // The element type T must match dtype(); callers dispatch on dtype() first.
  template <typename T>
  absl::Span<T> data() {
    return absl::Span<T>(reinterpret_cast<T*>(storage_.data()), size());
  }
  template <typename T>
  absl::Span<const T> data() const {
    return absl::Span<const T>(reinterpret_cast<const T*>(storage_.data()), size());
  }
  void* raw() { return storage_.data(); }
  const void* raw() const { return storage_.data(); }

 private:
  TensorSpec spec_;
  std::vector<uint64_t> storage_;  // uint64 keeps every element type aligned.
};

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_HOST_TENSOR_H_
