#include "python/src/arrays.h"

#include <string>

namespace nb = nanobind;

namespace reprise::python {

std::string DTypeText(const nb::dlpack::dtype& dtype) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = dtype.code == static_cast<uint8_t>(Code::Int)      ? "int"
                     : dtype.code == static_cast<uint8_t>(Code::UInt)   ? "uint"
                     : dtype.code == static_cast<uint8_t>(Code::Float)  ? "float"
                     : dtype.code == static_cast<uint8_t>(Code::Bfloat) ? "bfloat"
                     : dtype.code == static_cast<uint8_t>(Code::Bool)   ? "bool"
                                                                        : "other";
  return absl::StrCat(kind, dtype.bits);
}

}  // namespace reprise::python
