#include "src/api/verify_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace reprise {
namespace {

template <typename Bits>
Bits LoadBits(const char* data) {
  Bits bits;
  std::memcpy(&bits, data, sizeof(bits));
  return bits;
}

// bfloat16 and float16 as float32: both widen exactly.
float HalfToFloat(uint16_t h, bool bfloat) {
  if (bfloat) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  const uint32_t sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace

std::string ExactElementText(const char* data, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      const uint32_t bits = LoadBits<uint32_t>(data);
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return absl::StrFormat("%.9g (0x%08x)", f, bits);
    }
    case DType::kFloat64: {
      const uint64_t bits = LoadBits<uint64_t>(data);
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      return absl::StrFormat("%.17g (0x%016x)", d, bits);
    }
    case DType::kInt32: {
      const uint32_t bits = LoadBits<uint32_t>(data);
      return absl::StrFormat("%d (0x%08x)", static_cast<int32_t>(bits), bits);
    }
    case DType::kBFloat16:
    case DType::kFloat16: {
      const uint16_t bits = LoadBits<uint16_t>(data);
      return absl::StrFormat("%.5g (0x%04x)", HalfToFloat(bits, dtype == DType::kBFloat16), bits);
    }
  }
  return "?";
}

std::optional<ElementDifference> FirstDifference(absl::string_view a, absl::string_view b,
                                                 DType dtype) {
  const size_t size = static_cast<size_t>(DTypeSize(dtype));
  const size_t n = std::min(a.size(), b.size());
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), n) == 0) return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const size_t element = i / size;
    return ElementDifference{static_cast<int64_t>(element),
                             ExactElementText(a.data() + element * size, dtype),
                             ExactElementText(b.data() + element * size, dtype)};
  }
  // Sizes differ: the first element only one side has.
  return ElementDifference{static_cast<int64_t>(n / size),
                           a.size() > n ? ExactElementText(a.data() + n, dtype) : "(none)",
                           b.size() > n ? ExactElementText(b.data() + n, dtype) : "(none)"};
}

std::optional<VerifyMismatch> CompareSnapshots(absl::Span<const ComparedTensor> tensors,
                                               absl::string_view graph, absl::string_view eager,
                                               int step) {
  for (const ComparedTensor& t : tensors) {
    std::optional<ElementDifference> difference =
        FirstDifference(graph.substr(t.offset, t.bytes), eager.substr(t.offset, t.bytes), t.dtype);
    if (!difference.has_value()) continue;
    VerifyMismatch mismatch;
    mismatch.step = step;
    mismatch.tensor = t.name;
    mismatch.kind = t.kind;
    mismatch.node = t.node;
    mismatch.op = t.op;
    mismatch.element = difference->element;
    mismatch.graph_value = std::move(difference->a);
    mismatch.eager_value = std::move(difference->b);
    return mismatch;
  }
  return std::nullopt;
}

std::string VerifyMismatch::ToString() const {
  return absl::StrCat("step ", step, ": ", kind, " '", tensor, "' (written by node '", node,
                      "', op ", op, ") differs first at element ", element, ": graph ", graph_value,
                      ", eager ", eager_value);
}

std::string VerifyResult::ToString() const {
  std::string text;
  if (mismatch.has_value()) {
    text = absl::StrCat("verify FAILED: captured and eager runs differ at ", mismatch->ToString());
  } else {
    text = absl::StrCat("verify passed: ", steps, " steps captured and eager agree bit for bit on ",
                        tensors_compared, " tensors per step");
  }
  if (!gradients_not_materialized.empty()) {
    absl::StrAppend(&text, " (", gradients_not_materialized.size(),
                    " gradients stay inside fused kernels and are checked through the updates)");
  }
  return text;
}

}  // namespace reprise
