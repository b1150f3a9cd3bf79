#include "src/codegen/grid_dependency.h"

#include <cctype>

namespace reprise::codegen {
namespace {

constexpr char kProducerWaitDefinition[] = R"(
static __device__ __forceinline__ void reprise_wait_for_producers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
)";

bool IsIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

size_t SkipSpace(const std::string& code, size_t at) {
  while (at < code.size() && std::isspace(static_cast<unsigned char>(code[at])) != 0) ++at;
  return at;
}

// Where the body of `__global__ ... name(...)` opens, just past its '{'; npos if not found.
size_t BodyStart(const std::string& code, const std::string& name) {
  for (size_t at = code.find(name); at != std::string::npos; at = code.find(name, at + 1)) {
    if (at > 0 && IsIdentifierChar(code[at - 1])) continue;
    size_t open = SkipSpace(code, at + name.size());
    if (open >= code.size() || code[open] != '(') continue;
    // The declaration this name is in must start with __global__: nothing between them ends a
    // statement or a block.
    const size_t global = code.rfind("__global__", at);
    if (global == std::string::npos || code.find_first_of(";{}", global) < at) {
      continue;
    }
    int depth = 0;
    size_t close = open;
    for (; close < code.size(); ++close) {
      if (code[close] == '(') ++depth;
      if (code[close] == ')' && --depth == 0) break;
    }
    const size_t brace = SkipSpace(code, close + 1);
    if (brace < code.size() && code[brace] == '{') return brace + 1;
  }
  return std::string::npos;
}

}  // namespace

std::optional<std::string> WithProducerWait(const std::string& code, const std::string& name) {
  if (name.empty()) return std::nullopt;
  const size_t body = BodyStart(code, name);
  if (body == std::string::npos) return std::nullopt;
  std::string out = kProducerWaitDefinition;
  out.append(code, 0, body);
  out.append(" ");
  out.append(kProducerWaitCall);
  out.append(code, body, std::string::npos);
  return out;
}

}  // namespace reprise::codegen
