// Helpers of the graph-API convolution tests (cudnn_conv_graph*_gpu_test.cc): a convolution case,
// its operands rounded to the case's dtype with the float64 results of the conv ops' CPU
// references, and device copies of them.
#ifndef REPRISE_TESTS_GPU_CONV_GRAPH_TEST_UTIL_H_
#define REPRISE_TESTS_GPU_CONV_GRAPH_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/tensor.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"

namespace reprise::testing {

inline constexpr size_t kConvWorkspace = 256 << 20;

struct ConvCase {
  std::string name;
  Layout layout;
  DType dtype;
  bool tf32;
  int64_t n, c, h, w, k, r, s, stride, pad, dilation, groups;
  bool deterministic = false;
};
inline void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

// A 3x3 bfloat16 NHWC data gradient of ResNet-50's layer2 at batch 4 (a residual block's sum's
// shape): the measured-choice tests' case, legacy call and graph API alike.
inline ConvCase Layer2DgradCase(std::string name) {
  return {
      std::move(name), Layout::kNHWC, DType::kBFloat16, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1};
}

// Relative L2 error against the float64 reference: strict float32 differs by its summation
// order; TF32 rounds inputs to 10 bits; 16-bit data rounds the outputs (8 or 11 bits) of float32
// sums of exactly representable inputs.
double Tolerance(const ConvCase& t);
runtime::ConvShape ShapeOf(const ConvCase& t);

// `value` as the nearest `dtype` number; host values in `dtype`'s bytes, and back.
double RoundTo(DType dtype, double value);
std::vector<uint8_t> Encode(DType dtype, const std::vector<double>& values);
std::vector<double> Decode(DType dtype, const std::vector<uint8_t>& bytes);
double RelativeL2(const std::vector<double>& got, const std::vector<double>& want);

// The operands of one case (uniform in [-1, 1], rounded to its dtype) and the float64 results of
// the conv ops' CPU references: y = conv2d(x', w), dx = conv2d_dgrad(dy, w),
// dw = conv2d_wgrad(x', dy), where x' = prologue(i, x[i]) rounded to the dtype (x itself without
// a prologue). `x` keeps the operand before the prologue.
struct ConvReference {
  std::vector<double> x, w, dy, y, dx, dw;
};
ConvReference ComputeConvReference(
    const ConvCase& t, const std::function<double(int64_t, double)>& prologue = nullptr);

// The channel of element `i` of a 4-D activation of `c` channels and h·w pixels.
int64_t ChannelOf(Layout layout, int64_t i, int64_t c, int64_t hw);

// Device copies of a case's operands and room for each result.
class ConvDevice {
 public:
  static absl::StatusOr<ConvDevice> Create(DType dtype, const ConvReference& ref);

  void* x() const { return buffers_[0].data(); }
  void* w() const { return buffers_[1].data(); }
  void* dy() const { return buffers_[2].data(); }
  void* out(runtime::ConvKind kind) const { return buffers_[3 + static_cast<int>(kind)].data(); }
  // Operands of `kind` in the order CudnnConv and CudnnConvGraph take them.
  const void* a(runtime::ConvKind kind) const;
  const void* b(runtime::ConvKind kind) const;
  runtime::ConvGraphBuffers Buffers(runtime::ConvKind kind) const {
    return {.a = a(kind), .b = b(kind), .out = out(kind)};
  }
  const runtime::CudnnHandle& cudnn() const { return cudnn_; }
  cudaStream_t stream() const { return stream_.get(); }
  void* workspace() const { return workspace_.data(); }

  // `count` elements of `kind`'s result; Clear fills them with NaN-like bytes first.
  absl::StatusOr<std::vector<double>> Read(runtime::ConvKind kind, size_t count) const;
  absl::Status Clear(runtime::ConvKind kind, size_t count) const;

 private:
  ConvDevice(DType dtype, runtime::CudnnHandle cudnn, runtime::Stream stream,
             runtime::DeviceBuffer workspace, std::vector<runtime::DeviceBuffer> buffers)
      : dtype_(dtype),
        cudnn_(std::move(cudnn)),
        stream_(std::move(stream)),
        workspace_(std::move(workspace)),
        buffers_(std::move(buffers)) {}
  size_t Bytes(size_t count) const { return count * (dtype_ == DType::kFloat32 ? 4 : 2); }

  DType dtype_;
  runtime::CudnnHandle cudnn_;
  runtime::Stream stream_;
  runtime::DeviceBuffer workspace_;
  std::vector<runtime::DeviceBuffer> buffers_;  // x, w, dy, y, dx, dw.
};

// "<GPU name> sm_<major><minor>", the device part of the plan caches' keys; "" without a device.
std::string DeviceKeyForTests();

// A kernel store on the cache folder `dir`, as a new process would open it (for the measured
// choices' records), and the keys of the entries in `dir`.
std::unique_ptr<runtime::KernelStore> StoreOn(const std::string& dir);
std::vector<std::string> EntryKeysIn(const std::string& dir);

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_CONV_GRAPH_TEST_UTIL_H_
