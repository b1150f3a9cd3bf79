// Element types, shapes and tensor specifications: the static facts of every value in a graph.
#ifndef REPRISE_INCLUDE_REPRISE_TENSOR_H_
#define REPRISE_INCLUDE_REPRISE_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise {

// Element type of a tensor. float64 exists for reference checks on the CPU; bfloat16 and float16
// are the 16-bit floats of mixed-precision training (the CPU reference computes them in float32
// and rounds each result to nearest even).
enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kBFloat16, kFloat16 };

absl::string_view DTypeName(DType dtype);
int64_t DTypeSize(DType dtype);
bool IsFloat(DType dtype);         // Any of the float types.
bool IsLowPrecision(DType dtype);  // bfloat16 or float16.

// Order of a 4-D image tensor's dimensions: batch, channels, height, width (PyTorch's default) or
// channels last, which tensor-core convolutions prefer.
enum class Layout : uint8_t { kNCHW, kNHWC };
absl::string_view LayoutName(Layout layout);  // "NCHW", "NHWC": the ops' "layout" attribute.

// A static shape: a list of non-negative extents. Rank 0 is a scalar.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // The product of the extents; -1 when an extent is negative or the product overflows int64.
  // Graph refuses such shapes, so every value of a graph has a valid count.
  int64_t NumElements() const;
  // The product of the extents; InvalidArgument naming the shape when an extent is negative or
  // the product overflows int64.
  absl::StatusOr<int64_t> CheckedNumElements() const;
  std::string ToString() const;  // "[32, 256]"

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }

 private:
  std::vector<int64_t> dims_;
};

// Shape and element type of one value.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::kFloat32;

  int64_t NumElements() const { return shape.NumElements(); }
  int64_t bytes() const { return shape.NumElements() * DTypeSize(dtype); }
  // Byte size; InvalidArgument naming the spec when the count or the size overflows int64.
  absl::StatusOr<int64_t> CheckedBytes() const;
  std::string ToString() const;  // "f32[32, 256]"
  bool operator==(const TensorSpec& other) const = default;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_TENSOR_H_
