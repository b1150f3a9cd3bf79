#include "tests/gpu/conv_graph_test_util.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/runtime/disk_cache.h"
#include "src/util/status_macros.h"
#include "tests/gpu/device_upload.h"

namespace reprise::testing {

using runtime::ConvKind;

double Tolerance(const ConvCase& t) {
  if (t.dtype == DType::kBFloat16) return 1e-2;
  if (t.dtype == DType::kFloat16) return 2e-3;
  return t.tf32 ? 5e-3 : 1e-5;
}

runtime::ConvShape ShapeOf(const ConvCase& t) {
  const auto out = [&](int64_t in, int64_t kernel) {
    return (in + 2 * t.pad - t.dilation * (kernel - 1) - 1) / t.stride + 1;
  };
  return {.layout = t.layout,
          .dtype = t.dtype,
          .n = t.n,
          .c = t.c,
          .h = t.h,
          .w = t.w,
          .k = t.k,
          .r = t.r,
          .s = t.s,
          .p = out(t.h, t.r),
          .q = out(t.w, t.s),
          .stride_h = t.stride,
          .stride_w = t.stride,
          .pad_h = t.pad,
          .pad_w = t.pad,
          .dilation_h = t.dilation,
          .dilation_w = t.dilation,
          .groups = t.groups};
}

double RoundTo(DType dtype, double value) {
  const float v = static_cast<float>(value);
  if (dtype == DType::kBFloat16) return ir::BFloat16ToFloat(ir::FloatToBFloat16(v));
  if (dtype == DType::kFloat16) return ir::HalfToFloat(ir::FloatToHalf(v));
  return v;
}

std::vector<uint8_t> Encode(DType dtype, const std::vector<double>& values) {
  std::vector<uint8_t> bytes(values.size() * (dtype == DType::kFloat32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    if (dtype == DType::kFloat32) {
      reinterpret_cast<float*>(bytes.data())[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(bytes.data())[i] =
          dtype == DType::kBFloat16 ? ir::FloatToBFloat16(v) : ir::FloatToHalf(v);
    }
  }
  return bytes;
}

std::vector<double> Decode(DType dtype, const std::vector<uint8_t>& bytes) {
  const size_t count = bytes.size() / (dtype == DType::kFloat32 ? 4 : 2);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kFloat32) {
      values[i] = reinterpret_cast<const float*>(bytes.data())[i];
    } else {
      const uint16_t v = reinterpret_cast<const uint16_t*>(bytes.data())[i];
      values[i] = dtype == DType::kBFloat16 ? ir::BFloat16ToFloat(v) : ir::HalfToFloat(v);
    }
  }
  return values;
}

double RelativeL2(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(err) : std::sqrt(err / norm);
}

int64_t ChannelOf(Layout layout, int64_t i, int64_t c, int64_t hw) {
  return layout == Layout::kNHWC ? i % c : (i / hw) % c;
}

ConvReference ComputeConvReference(const ConvCase& t,
                                   const std::function<double(int64_t, double)>& prologue) {
  const runtime::ConvShape s = ShapeOf(t);
  const std::string layout(LayoutName(t.layout));
  const auto activation = [&](int64_t c, int64_t h, int64_t w) {
    return t.layout == Layout::kNHWC ? Shape{t.n, h, w, c} : Shape{t.n, c, h, w};
  };
  const int64_t cg = t.c / t.groups;
  const Attrs attrs = {{"stride_h", t.stride},     {"stride_w", t.stride},
                       {"pad_h", t.pad},           {"pad_w", t.pad},
                       {"dilation_h", t.dilation}, {"dilation_w", t.dilation},
                       {"groups", t.groups},       {"layout", layout}};
  Graph g;
  const Initializer uniform = Initializer::Uniform(-1, 1);
  const Value x = *g.AddConstant("x", {activation(t.c, t.h, t.w)}, uniform);
  const Value w = *g.AddConstant(
      "w", {t.layout == Layout::kNHWC ? Shape{t.k, t.r, t.s, cg} : Shape{t.k, cg, t.r, t.s}},
      uniform);
  const Value dy = *g.AddConstant("dy", {activation(t.k, s.p, s.q)}, uniform);
  const Value y = *g.AddOp1(ops::Conv2dOp(), "conv", {x, w}, attrs);
  Attrs dgrad = attrs;
  dgrad["input_h"] = t.h;
  dgrad["input_w"] = t.w;
  const Value dx = *g.AddOp1(ops::Conv2dDgradOp(), "conv.dgrad", {dy, w}, dgrad);
  Attrs wgrad = attrs;
  wgrad["kernel_h"] = t.r;
  wgrad["kernel_w"] = t.s;
  const Value dw = *g.AddOp1(ops::Conv2dWgradOp(), "conv.wgrad", {x, dy}, wgrad);
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 7);
  ConvReference ref;
  for (auto [name, values] : {std::pair{"x", &ref.x}, {"w", &ref.w}, {"dy", &ref.dy}}) {
    auto leaf = (*cpu.Leaf(name))->data<double>();
    values->assign(leaf.begin(), leaf.end());
    for (double& v : *values) v = RoundTo(t.dtype, v);
    std::vector<double> used = *values;
    if (prologue && values == &ref.x) {
      for (size_t i = 0; i < used.size(); ++i) {
        used[i] = RoundTo(t.dtype, prologue(static_cast<int64_t>(i), used[i]));
      }
    }
    (void)cpu.SetLeaf(name, used);
  }
  (void)cpu.Run();
  for (auto [value, values] : {std::pair{y, &ref.y}, {dx, &ref.dx}, {dw, &ref.dw}}) {
    auto out = (*cpu.Tensor(value))->data<double>();
    values->assign(out.begin(), out.end());
  }
  return ref;
}

absl::StatusOr<ConvDevice> ConvDevice::Create(DType dtype, const ConvReference& ref) {
  ASSIGN_OR_RETURN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
  ASSIGN_OR_RETURN(runtime::DeviceBuffer workspace, runtime::DeviceBuffer::Create(kConvWorkspace));
  std::vector<runtime::DeviceBuffer> buffers;
  for (const std::vector<double>* values : {&ref.x, &ref.w, &ref.dy, &ref.y, &ref.dx, &ref.dw}) {
    ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer, UploadToDevice(Encode(dtype, *values)));
    buffers.push_back(std::move(buffer));
  }
  return ConvDevice(dtype, std::move(cudnn), std::move(stream), std::move(workspace),
                    std::move(buffers));
}

const void* ConvDevice::a(ConvKind kind) const {
  return kind == ConvKind::kBackwardData ? dy() : x();
}
const void* ConvDevice::b(ConvKind kind) const {
  return kind == ConvKind::kBackwardFilter ? dy() : w();
}

absl::StatusOr<std::vector<double>> ConvDevice::Read(ConvKind kind, size_t count) const {
  std::vector<uint8_t> bytes(Bytes(count));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(bytes.data(), out(kind), bytes.size(), cudaMemcpyDeviceToHost, stream_.get()),
      "read");
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), "read");
  return Decode(dtype_, bytes);
}

absl::Status ConvDevice::Clear(ConvKind kind, size_t count) const {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out(kind), 0xff, Bytes(count), stream_.get()), "clear");
  return absl::OkStatus();
}

std::string DeviceKeyForTests() {
  absl::StatusOr<runtime::DeviceInfo> device = runtime::UseDevice(0);
  return device.ok() ? absl::StrCat(device->name, " sm_", device->cc_major, device->cc_minor) : "";
}

std::unique_ptr<runtime::KernelStore> StoreOn(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<runtime::DiskCache>> disk = runtime::DiskCache::Open({.dir = dir});
  EXPECT_TRUE(disk.ok()) << disk.status();
  return std::make_unique<runtime::KernelStore>("sm_90", disk.ok() ? *std::move(disk) : nullptr);
}

std::vector<std::string> EntryKeysIn(const std::string& dir) {
  std::vector<std::string> keys;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    std::string key;
    if (runtime::IsCacheEntryName(file.path().filename().string(), &key)) keys.push_back(key);
  }
  return keys;
}

}  // namespace reprise::testing
