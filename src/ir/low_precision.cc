#include "src/ir/low_precision.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::ir {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = Bits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // Stay a NaN.
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);                       // Ties to even.
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToHalf(float value) {
  const uint32_t bits = Bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude >= 0x7f800000) {  // Inf or NaN.
    return sign | 0x7c00 | (magnitude > 0x7f800000 ? 0x0200 : 0);
  }
  if (magnitude >= 0x477ff000) return sign | 0x7c00;  // Rounds past 65504: infinity.
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent >= -14) {  // Normal: 10 mantissa bits kept of 23, ties to even.
    const uint32_t mantissa = magnitude & 0x7fffff;
    uint32_t half = (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Subnormal (or zero): the value in units of 2^-24, rounded to nearest even.
  const float scaled = std::ldexp(FromBits(magnitude), 24);
  const float rounded = std::nearbyint(scaled);  // The default rounding mode: ties to even.
  return sign | static_cast<uint16_t>(rounded);
}

float HalfToFloat(uint16_t bits) {
  const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
}

double FloatElement(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data<float>()[i];
    case DType::kFloat64:
      return t.data<double>()[i];
    case DType::kBFloat16:
      return BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DType::kFloat16:
      return HalfToFloat(t.data<uint16_t>()[i]);
    case DType::kInt32:
      return t.data<int32_t>()[i];
  }
  return 0;
}

void SetFloatElement(HostTensor& t, int64_t i, double value) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data<float>()[i] = static_cast<float>(value);
      break;
    case DType::kFloat64:
      t.data<double>()[i] = value;
      break;
    case DType::kBFloat16:
      t.data<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(value));
      break;
    case DType::kFloat16:
      t.data<uint16_t>()[i] = FloatToHalf(static_cast<float>(value));
      break;
    case DType::kInt32:
      t.data<int32_t>()[i] = static_cast<int32_t>(value);
      break;
  }
}

absl::Status ConvertFloats(const HostTensor& from, HostTensor& to) {
  if (!(from.spec().shape == to.spec().shape) || !IsFloat(from.dtype()) || !IsFloat(to.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot convert ", from.spec().ToString(), " to ", to.spec().ToString()));
  }
  for (int64_t i = 0; i < from.size(); ++i) SetFloatElement(to, i, FloatElement(from, i));
  return absl::OkStatus();
}

absl::Status RoundToStored(DType stored, HostTensor& t) {
  if (!IsLowPrecision(stored) || IsLowPrecision(t.dtype())) return absl::OkStatus();
  HostTensor rounded(TensorSpec{t.spec().shape, stored});
  RETURN_IF_ERROR(ConvertFloats(t, rounded));
  return ConvertFloats(rounded, t);
}

}  // namespace reprise::ir
